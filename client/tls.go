package client

import (
	"crypto/tls"
	"errors"
	"net/http"
)

// tlsClient is the HTTP client that makes a request with hc and conf: hc,
// or, with conf, a client of its own whose transport (Go's default one,
// copied) checks the gateway's certificate with conf. Both set is an
// error: conf would have no effect on hc's transport.
func tlsClient(hc *http.Client, conf *tls.Config) (*http.Client, error) {
	if conf == nil {
		return hc, nil
	}
	if hc != nil {
		return nil, errors.New("TLSConfig and HTTPClient are both set: set the TLS configuration on HTTPClient's transport instead")
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = conf
	return &http.Client{Transport: t}, nil
}
