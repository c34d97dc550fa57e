package units

import "testing"

func f(v float64) *float64 { return &v }
func i(v int) *int         { return &v }

func TestUnits(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Count(f(15143103360)), "15143103360"},
		{Count(f(2.6)), "3"},
		{Count(nil), "absent"},
		{Int(i(42)), "42"},
		{Int(nil), "absent"},
		{Exact(1100), "1100"},
		{Exact(0.0036608825379310346), "0.0036608825379310346"},
		{Grouped(826352), "826,352"},
		{Grouped(-1234567), "-1,234,567"},
		{Grouped(999), "999"},
		{Grouped(0), "0"},
		{GroupedFloat(20789.6), "20,790"},
		{MS(f(38.96)), "39.0"},
		{MS(nil), "absent"},
		{Rate(f(117.73168)), "117.7"},
		{Fraction(f(0.9976599750162746)), "0.9977"},
		{Fraction(nil), "absent"},
		{Percent(f(0.271)), "27%"},
		{Percent(nil), "absent"},
		{Share(0.125), "12.5%"},
		{SignedShare(0.932), "+93.2%"},
		{SignedShare(-0.1), "-10.0%"},
		{Number(18030), "18030"},
		{Number(1234.56), "1234.6"},
		{Number(3.14159), "3.14"},
		{Number(0.99766), "0.9977"},
		{Value(nil), "absent"},
		{Value(f(2)), "2"},
		{Compact(1.2e9), "1.2G"},
		{Compact(3.4e8), "340M"},
		{Compact(12000), "12k"},
		{Compact(150), "150"},
		{Compact(0.998), "0.998"},
		{Text(""), "absent"},
		{Text("0.11"), "0.11"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
