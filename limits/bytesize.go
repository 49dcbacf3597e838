package limits

import (
	"fmt"
	"strconv"
	"strings"
)

// ByteSize is a size in bytes that a flag or an MCPP_ variable may give
// with a unit: 1048576, 1MiB, 1MB, 512KiB, 8M, 2GiB.
type ByteSize int64

// byteUnits are the suffixes ByteSize reads, longest first; KB and kB mean
// 1000, KiB and K mean 1024, as operators write them.
var byteUnits = []struct {
	suffix string
	factor int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"kB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
}

// String implements flag.Value.
func (b *ByteSize) String() string {
	if b == nil {
		return "0"
	}
	for _, u := range []struct {
		suffix string
		factor int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if v := int64(*b); v != 0 && v%u.factor == 0 {
			return strconv.FormatInt(v/u.factor, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(*b), 10)
}

// Set implements flag.Value.
func (b *ByteSize) Set(s string) error {
	s = strings.TrimSpace(s)
	factor := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, factor = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/factor {
		return fmt.Errorf("%q is not a size in bytes (like 1048576, 512KiB, 8MiB, 1GiB)", s)
	}
	*b = ByteSize(n * factor)
	return nil
}
