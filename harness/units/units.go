// Package units writes kvbench's numbers for people, each kind one way: token and byte
// counts, milliseconds, rates, fractions and percentages, and a value nothing measured as
// "absent", never as 0 or a dash. A Unit's Scaler (scale.go) is its one way; a table's
// column takes one Scaler chosen from its values (Scale), as benchstat's benchunit does.
// Records keep the numbers themselves; this is only how consoles, tables and sentences show
// them. Pure formatting, no I/O.
package units

import (
	"math"
	"strconv"
)

// Absent is how a value nothing measured is written (a nil pointer): the server did not
// expose the counter, usage lacked the field, or it could not be computed.
const Absent = "absent"

// NotApplicable fills a table cell whose column does not apply to the row (a sequence step
// has no verdict): not a missing measurement.
const NotApplicable = "-"

// Count writes a counter value or a token or byte count as a whole number (15143103360).
func Count(p *float64) string {
	if p == nil {
		return Absent
	}
	return strconv.FormatFloat(math.Round(*p), 'f', 0, 64)
}

// Int writes an integer, Absent when nil.
func Int(p *int) string {
	if p == nil {
		return Absent
	}
	return strconv.Itoa(*p)
}

// Exact writes v with every digit it has (1100, 0.0036608), for reasons that quote a reading.
func Exact(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// Grouped writes n with thousands separators (826,352), as the seed records' prose does.
func Grouped(n int) string {
	s := strconv.Itoa(n)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	out := make([]byte, 0, len(s)+len(s)/3)
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// GroupedFloat writes v rounded to a whole number with thousands separators.
func GroupedFloat(v float64) string { return Grouped(int(math.Round(v))) }

// MS writes a duration in milliseconds to one decimal (39.0).
func MS(p *float64) string { return Fixed(Milliseconds).Value(p) }

// Rate writes a rate (tokens or requests per second) to one decimal.
func Rate(p *float64) string { return Fixed(PerSecond).Value(p) }

// Fraction writes a fraction of 1 to four places (0.9999).
func Fraction(p *float64) string { return fixed(p, 4) }

// Percent writes a fraction of 1 as a whole percentage (27%), as a table's column shows it.
func Percent(p *float64) string { return WholePercent.Value(p) }

// WholePercent is the Percentage scaler without decimals (27%).
var WholePercent = Scaler{Unit: Percentage, Prec: 0, Factor: 0.01, Suffix: "%"}

// Share writes a fraction of 1 as a percentage to one decimal (12.5%).
func Share(f float64) string { return Fixed(Percentage).Format(f) }

// SignedShare writes a relative change as a signed percentage to one decimal (+12.5%).
func SignedShare(f float64) string {
	s := Fixed(Percentage)
	s.Signed = true
	return s.Format(f)
}

func fixed(p *float64, places int) string {
	if p == nil {
		return Absent
	}
	return strconv.FormatFloat(*p, 'f', places, 64)
}

// Number writes a measured value briefly and without exponents: whole numbers as they are
// (18030), others to a precision that fits their size (1234.5, 3.14, 0.9977).
func Number(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	switch a := math.Abs(v); {
	case a >= 1000:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}

// Value writes a measured value (Number), Absent when nil.
func Value(p *float64) string {
	if p == nil {
		return Absent
	}
	return Number(*p)
}

// Compact writes a value for a chart axis in three significant digits with an SI suffix
// (1.2G, 340M, 12k, 3.5).
func Compact(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e9:
		return strconv.FormatFloat(v/1e9, 'g', 3, 64) + "G"
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	case a >= 100 || v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// Text writes a piece of optional text, Absent when empty.
func Text(s string) string {
	if s == "" {
		return Absent
	}
	return s
}
