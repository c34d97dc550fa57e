package units

import (
	"math"
	"strconv"
)

// Unit is a kind of number kvbench shows; each is written one way (its Scaler), in the
// spirit of benchstat's benchunit: a column's values share one Scaler, chosen from them.
type Unit int

const (
	// Milliseconds is a duration in ms, to one decimal (39.0); the unit is named beside it.
	Milliseconds Unit = iota
	// Seconds is a duration in s, to one decimal (12.5).
	Seconds
	// Percentage is a fraction of 1 written as a percentage to one decimal (12.5%).
	Percentage
	// TokenCount is a whole count of tokens, bytes or events (826352).
	TokenCount
	// ByteSize is a size in bytes written in binary units, GiB to two decimals (1.50 GiB).
	ByteSize
	// Bandwidth is bytes per second written in GB/s (10^9 bytes): one decimal on its own
	// (12.3 GB/s), a column to three significant digits of its smallest value.
	Bandwidth
	// PerSecond is a rate (tokens/s, requests/s) to one decimal (117.7).
	PerSecond
	// Ratio is how many times one value is another (a gain), to two decimals (2.35x).
	Ratio
)

// Scaler writes numbers of one Unit at one scale and precision, so the values of a table's
// column line up and read alike. Scale chooses one from a column's values; Fixed is a unit's
// scaler for a value on its own.
type Scaler struct {
	Unit Unit
	// Prec is the number of decimal places.
	Prec int
	// Factor divides a value before it is written (2^30 for GiB); one below 1 multiplies by
	// its inverse (0.01: a percentage is 100*v, as it was always computed).
	Factor float64
	// Suffix follows the number: what the scale makes of the unit ("%", " GiB", " GB/s");
	// "" where the unit is named by the sentence or the column header (ms, tokens, /s).
	Suffix string
	// Signed writes a + before a positive value (a change).
	Signed bool
}

// binary prefixes of ByteSize, largest first.
var bytePrefixes = []struct {
	factor float64
	suffix string
}{{1 << 40, " TiB"}, {1 << 30, " GiB"}, {1 << 20, " MiB"}, {1 << 10, " KiB"}, {1, " B"}}

// Fixed is u's scaler for one value: the precision and scale the Unit's doc names.
func Fixed(u Unit) Scaler {
	switch u {
	case Milliseconds, Seconds, PerSecond:
		return Scaler{Unit: u, Prec: 1, Factor: 1}
	case Percentage:
		return Scaler{Unit: u, Prec: 1, Factor: 0.01, Suffix: "%"}
	case ByteSize:
		return Scaler{Unit: u, Prec: 2, Factor: 1 << 30, Suffix: " GiB"}
	case Bandwidth:
		return Scaler{Unit: u, Prec: 1, Factor: 1e9, Suffix: " GB/s"}
	case Ratio:
		return Scaler{Unit: u, Prec: 2, Factor: 1, Suffix: "x"}
	default:
		return Scaler{Unit: TokenCount, Prec: 0, Factor: 1}
	}
}

// Scale chooses one scaler for a column of u's values, from the smallest non-zero magnitude
// among them: bytes take the largest binary prefix it reaches (MiB when all are below a
// GiB), and a unit with decimals gets more of them while that value would show fewer than
// two significant digits (0.04 ms is 0.04, not 0.0), three at most beyond the unit's own;
// Bandwidth keeps three significant digits. Counts stay whole. Without a non-zero value it
// is Fixed(u).
func Scale(u Unit, values ...float64) Scaler {
	s := Fixed(u)
	least := math.Inf(1)
	for _, v := range values {
		if a := math.Abs(v); a > 0 && a < least && !math.IsInf(a, 0) && !math.IsNaN(a) {
			least = a
		}
	}
	if math.IsInf(least, 1) || u == TokenCount {
		return s
	}
	if u == ByteSize {
		for _, p := range bytePrefixes {
			if least >= p.factor || p.factor == 1 {
				s.Factor, s.Suffix = p.factor, p.suffix
				break
			}
		}
		if s.Factor == 1 {
			s.Prec = 0 // whole bytes
			return s
		}
	}
	if u == Bandwidth {
		return s.Digits(3, least) // 123, 12.3, 1.23, 0.123
	}
	x := least / s.Factor
	for base := s.Prec; s.Prec < base+3 && x < math.Pow(10, float64(1-s.Prec)); {
		s.Prec++
	}
	return s
}

// Digits is s writing v, at s's scale, to n significant digits (n 3: 0.00366, 12.3, 290):
// for a figure whose size is not known beforehand, as a copy time.
func (s Scaler) Digits(n int, v float64) Scaler {
	f := s.Factor
	if f == 0 {
		f = 1
	}
	x := math.Abs(v) / f
	if x == 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return s
	}
	s.Prec = max(0, n-1-int(math.Floor(math.Log10(x))))
	return s
}

// Format writes v at the scaler's scale and precision.
func (s Scaler) Format(v float64) string {
	f := s.Factor
	if f == 0 {
		f = 1
	}
	x := v / f
	if f < 1 {
		x = v * (1 / f)
	}
	out := strconv.FormatFloat(x, 'f', s.Prec, 64)
	if s.Signed && x >= 0 {
		out = "+" + out
	}
	return out + s.Suffix
}

// Value writes *p (Format), Absent when p is nil: nothing measured it.
func (s Scaler) Value(p *float64) string {
	if p == nil {
		return Absent
	}
	return s.Format(*p)
}

// Whole writes a count held in a float (a counter's delta, bytes, tokens) as a whole number.
func Whole(v float64) string { return Fixed(TokenCount).Format(v) }

// Sec writes a duration in seconds to one decimal (12.5).
func Sec(v float64) string { return Fixed(Seconds).Format(v) }

// Times writes a ratio to two decimals (2.35x).
func Times(v float64) string { return Fixed(Ratio).Format(v) }

// GBps writes bytes per second on their own in GB/s to three significant digits (290 GB/s,
// 12.3 GB/s), as Scale chooses for one value.
func GBps(bytesPerSecond float64) string {
	return Scale(Bandwidth, bytesPerSecond).Format(bytesPerSecond)
}

// GiBs writes a size in bytes in GiB to two decimals (1.50 GiB).
func GiBs(bytes float64) string { return Fixed(ByteSize).Format(bytes) }

// Places is s writing n decimal places: for a figure whose sentence has always shown more
// (a warm-cache share to two) than its unit's own.
func (s Scaler) Places(n int) Scaler {
	s.Prec = n
	return s
}
