package units

import "testing"

// TestFixed: each unit's one way for a single value.
func TestFixed(t *testing.T) {
	for _, c := range []struct {
		u    Unit
		v    float64
		want string
	}{
		{Milliseconds, 38.96, "39.0"},
		{Seconds, 12.54, "12.5"},
		{Percentage, 0.125, "12.5%"},
		{TokenCount, 2.5, "2"}, // half to even, as %.0f wrote it
		{TokenCount, 3.5, "4"},
		{TokenCount, 15143103360, "15143103360"},
		{ByteSize, 1.5 * (1 << 30), "1.50 GiB"},
		{Bandwidth, 12.34e9, "12.3 GB/s"},
		{PerSecond, 117.73168, "117.7"},
	} {
		if got := Fixed(c.u).Format(c.v); got != c.want {
			t.Errorf("Fixed(%d).Format(%v) = %q, want %q", c.u, c.v, got, c.want)
		}
	}
	if got := Fixed(Milliseconds).Value(nil); got != Absent {
		t.Errorf("Value(nil) = %q, want %q", got, Absent)
	}
	if got, want := Whole(1234.4), "1234"; got != want {
		t.Errorf("Whole = %q, want %q", got, want)
	}
	if got, want := GiBs(3*(1<<30)), "3.00 GiB"; got != want {
		t.Errorf("GiBs = %q, want %q", got, want)
	}
	if got, want := Sec(0.25), "0.2"; got != want { // half to even, as %.1f
		t.Errorf("Sec = %q, want %q", got, want)
	}
}

// TestScaleColumn: a column shares one scaler chosen from its values, so its smallest
// value keeps two significant digits and the rest line up with it.
func TestScaleColumn(t *testing.T) {
	for _, c := range []struct {
		name   string
		u      Unit
		values []float64
		want   []string
	}{
		{"ms as usual", Milliseconds, []float64{39.04, 1200}, []string{"39.0", "1200.0"}},
		{"sub-ms lag", Milliseconds, []float64{0.04, 2.5}, []string{"0.040", "2.500"}},
		{"ms precision is capped", Milliseconds, []float64{0.00001}, []string{"0.0000"}},
		{"request rates", PerSecond, []float64{0.52, 4.166}, []string{"0.52", "4.17"}},
		{"rates of one decimal", PerSecond, []float64{4.166, 117.7}, []string{"4.2", "117.7"}},
		{"zeros do not choose", PerSecond, []float64{0, 4.166}, []string{"0.0", "4.2"}},
		{"small shares", Percentage, []float64{0.001, 0.5}, []string{"0.10%", "50.00%"}},
		{"counts stay whole", TokenCount, []float64{3, 0.4}, []string{"3", "0"}},
		{"bytes below a GiB", ByteSize, []float64{512 << 20, 1 << 30}, []string{"512.00 MiB", "1024.00 MiB"}},
		{"bytes in GiB", ByteSize, []float64{2 << 30, 40 << 30}, []string{"2.00 GiB", "40.00 GiB"}},
		{"a few bytes", ByteSize, []float64{12, 3000}, []string{"12 B", "3000 B"}},
		{"bandwidth", Bandwidth, []float64{1.234e9, 25e9}, []string{"1.23 GB/s", "25.00 GB/s"}},
		{"fast bandwidth", Bandwidth, []float64{123.4e9}, []string{"123 GB/s"}},
		{"nothing non-zero", Milliseconds, []float64{0}, []string{"0.0"}},
	} {
		s := Scale(c.u, c.values...)
		for i, v := range c.values {
			if got := s.Format(v); got != c.want[i] {
				t.Errorf("%s: Format(%v) = %q, want %q", c.name, v, got, c.want[i])
			}
		}
	}
}

// TestSigned: a change carries its sign, a fall its minus.
func TestSigned(t *testing.T) {
	s := Fixed(Percentage)
	s.Signed = true
	if got := s.Format(0.932); got != "+93.2%" {
		t.Errorf("got %q", got)
	}
	if got := s.Format(-0.1); got != "-10.0%" {
		t.Errorf("got %q", got)
	}
}

// TestRatio: a gain is written to two decimals with its x, and a column of small ratios
// keeps two significant digits.
func TestRatio(t *testing.T) {
	if got, want := Times(2.3456), "2.35x"; got != want {
		t.Errorf("Times = %q, want %q", got, want)
	}
	if got, want := Fixed(Ratio).Format(12), "12.00x"; got != want {
		t.Errorf("Fixed(Ratio) = %q, want %q", got, want)
	}
	if got, want := Scale(Ratio, 0.004, 1).Format(0.004), "0.0040x"; got != want {
		t.Errorf("Scale(Ratio) = %q, want %q", got, want)
	}
}

// TestDigits: a figure of unknown size keeps n significant digits at its scaler's scale,
// as %.3g did but without exponents.
func TestDigits(t *testing.T) {
	for _, c := range []struct {
		s    Scaler
		v    float64
		want string
	}{
		{Fixed(Seconds), 0.00366, "0.00366"},
		{Fixed(Seconds), 12.345, "12.3"},
		{Fixed(Seconds), 1234.5, "1234"}, // whole digits are never cut
		{Fixed(Bandwidth), 290e9, "290 GB/s"},
		{Fixed(Seconds), 0, "0.0"}, // nothing to size: the unit's own precision
	} {
		if got := c.s.Digits(3, c.v).Format(c.v); got != c.want {
			t.Errorf("Digits(3, %v) = %q, want %q", c.v, got, c.want)
		}
	}
	for _, c := range []struct {
		v    float64
		want string
	}{{290e9, "290 GB/s"}, {12.34e9, "12.3 GB/s"}, {1.5e9, "1.50 GB/s"}, {0.25e9, "0.250 GB/s"}} {
		if got := GBps(c.v); got != c.want {
			t.Errorf("GBps(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}
