package record

import (
	"reflect"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/prompts"
)

// fill sets every field of the struct v points to a non-zero value (nested structs and
// pointers too), so a conversion that drops a field shows.
func fill(v reflect.Value, n *int) {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		v = v.Elem()
	}
	*n++
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Unix(int64(*n), 0).UTC()))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	case reflect.String:
		v.SetString("s" + string(rune('a'+*n%26)))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), n)
		v.Set(s)
	}
}

// sameFields reports the first field of want (by name) whose value got does not carry.
func sameFields(t *testing.T, want, got reflect.Value, path string) {
	for want.Kind() == reflect.Pointer {
		want, got = want.Elem(), got.Elem()
	}
	if want.Kind() != reflect.Struct || want.Type() == reflect.TypeOf(time.Time{}) {
		if want.Kind() == reflect.Slice {
			for i := range want.Len() {
				sameFields(t, want.Index(i), got.Index(i), path)
			}
			return
		}
		if want.Interface() != reflect.ValueOf(got.Interface()).Convert(want.Type()).Interface() {
			t.Errorf("%s: %v became %v", path, want.Interface(), got.Interface())
		}
		return
	}
	for i := range want.NumField() {
		f := want.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		g := got.FieldByName(f.Name)
		if !g.IsValid() {
			t.Errorf("%s.%s has no field in the record", path, f.Name)
			continue
		}
		sameFields(t, want.Field(i), g, path+"."+f.Name)
	}
}

// TestConversionsKeepEveryField: each producer type becomes its record type with nothing
// dropped, so a field added upstream without its record twin fails here.
func TestConversionsKeepEveryField(t *testing.T) {
	n := 0
	var res client.Result
	fill(reflect.ValueOf(&res), &n)
	sameFields(t, reflect.ValueOf(res), reflect.ValueOf(ResultOf(res)), "Result")

	var p prompts.Prompt
	fill(reflect.ValueOf(&p), &n)
	got := PromptOf(p)
	want := reflect.ValueOf(got)
	for i := range want.NumField() { // the record keeps a prompt's identity, not its text or plan
		name := want.Type().Field(i).Name
		if w, g := reflect.ValueOf(p).FieldByName(name), want.Field(i); w.Interface() != g.Interface() {
			t.Errorf("Prompt.%s: %v became %v", name, w.Interface(), g.Interface())
		}
	}

	var d verdict.Decision
	fill(reflect.ValueOf(&d), &n)
	var a capacity.Assessment
	fill(reflect.ValueOf(&a), &n)
	v := VerdictOf(d, &a)
	for _, name := range []string{"Verdict", "Reason", "DecidedBy", "Notes", "HitCoverage", "UsageAgrees", "ExpectedLoadBytes", "MeasuredLoadBytesPerToken",
		"Slot", "CrossChecks", "Diagnosis", "Offload", "SetupValid", "SetupReason", "Interpretation"} {
		sameFields(t, reflect.ValueOf(d).FieldByName(name), reflect.ValueOf(*v).FieldByName(name), "Decision."+name)
	}
	sameFields(t, reflect.ValueOf(a), reflect.ValueOf(*v.Capacity), "Assessment")
	sameFields(t, reflect.ValueOf(*assessmentOf(v.Capacity)), reflect.ValueOf(a), "Capacity")

	if ReplayRefOf(nil) != nil || ReplicaOf(nil) != nil || CapacityOf(nil) != nil {
		t.Error("nil became a value")
	}
	if r := ReplicaOf(&metrics.Attribution{Replica: "a", By: "b"}); !r.Known() || r.Replica != "a" || r.By != "b" {
		t.Errorf("replica %+v", r)
	}
	if (&Replica{Replica: UnknownReplica}).Known() || (*Replica)(nil).Known() {
		t.Error("an unknown replica is known")
	}
}
