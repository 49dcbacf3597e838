package gateway

import "strings"

// FlagList is a flag that may be given more than once (--oauth-issuer):
// each value is added to the list. A value may also hold several,
// comma-separated, as one MCPP_ environment variable must.
type FlagList []string

// String implements flag.Value.
func (l *FlagList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

// Set implements flag.Value.
func (l *FlagList) Set(v string) error {
	*l = append(*l, splitComma(v)...)
	return nil
}
