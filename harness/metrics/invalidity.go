package metrics

import "github.com/anvil-serving/kvbench/harness/record"

// Invalidity is the kind of reason a measured change of the counters cannot be trusted:
// the record's type, with its kinds.
type Invalidity = record.Invalidity

// Kinds of invalidity.
const (
	InvalidReset        = record.InvalidReset
	InvalidMissing      = record.InvalidMissing
	InvalidScrapeFailed = record.InvalidScrapeFailed
	InvalidContaminated = record.InvalidContaminated
)
