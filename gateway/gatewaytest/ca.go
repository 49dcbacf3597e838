package gatewaytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test, in memory, that issues
// the certificates a TLS gateway serves (Config's TLSCert and TLSKey): a
// client trusts it with Pool, ClientTLS or File, as it would trust a
// company's private CA.
//
//	ca := gatewaytest.NewCA(t)
//	cfg := gatewaytest.Config()
//	cfg.TLSCert, cfg.TLSKey = ca.Files(t, "127.0.0.1")
//	srv := gatewaytest.Start(t, cfg) // srv.WS is wss://127.0.0.1:PORT/ws
//	c, err := client.Dial(ctx, srv.WS, client.Options{Pod: "lab", TLSConfig: ca.ClientTLS()})
type CA struct {
	Cert *x509.Certificate
	PEM  []byte // Cert, PEM-encoded: what a client is given to trust
	key  *ecdsa.PrivateKey
}

// certLifetime is how long the certificates a CA issues are valid, from
// an hour before they are made (a clock a little behind still takes them).
const certLifetime = 24 * time.Hour

// NewCA makes a certificate authority. It fails the test when it cannot.
func NewCA(tb testing.TB) *CA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: "mcpp test CA " + tb.Name()},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Pool is a certificate pool that holds this CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// ClientTLS is a client's TLS configuration that trusts this CA alone.
func (ca *CA) ClientTLS() *tls.Config {
	return &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
}

// File writes the CA's certificate (PEM) to a new file of the test's and
// returns its path: what mcpp --ca-file, NODE_EXTRA_CA_CERTS or
// SSL_CERT_FILE are given.
func (ca *CA) File(tb testing.TB) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "ca.pem")
	if err := os.WriteFile(path, ca.PEM, 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// Files issues a certificate for hosts (Issue) into a new directory of
// the test's and returns the paths of the certificate and its key.
func (ca *CA) Files(tb testing.TB, hosts ...string) (certFile, keyFile string) {
	tb.Helper()
	dir := tb.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.Issue(tb, certFile, keyFile, hosts...)
	return certFile, keyFile
}

// Issue makes a new server certificate for hosts (IP addresses or DNS
// names) with a new key and a random serial number, signed by the CA, and
// writes it to certFile and its key to keyFile, each through a new file
// renamed into place, as an operator rotating a certificate would. The
// key is written first. It returns the certificate.
func (ca *CA) Issue(tb testing.TB, certFile, keyFile string, hosts ...string) *x509.Certificate {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(tb),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	replaceFile(tb, keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	replaceFile(tb, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return cert
}

// replaceFile writes data to a new file beside path, then renames it to
// path, so that a reader sees the old file or the new one, never half.
func replaceFile(tb testing.TB, path string, data []byte, perm os.FileMode) {
	tb.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatal(err)
	}
}

// serial is a random certificate serial number (RFC 5280: positive, at
// most 20 bytes).
func serial(tb testing.TB) *big.Int {
	tb.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		tb.Fatal(err)
	}
	return n.Add(n, big.NewInt(1))
}
