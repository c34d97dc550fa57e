package metrics

// Invalidity is the kind of reason a measured change of the counters cannot be trusted;
// each gets its own wording where a verdict names it.
type Invalidity string

// Kinds of invalidity.
const (
	InvalidReset        Invalidity = "reset"         // a counter went down: the server restarted
	InvalidMissing      Invalidity = "missing"       // a counter the change needs was not read
	InvalidScrapeFailed Invalidity = "scrape_failed" // a scrape the change needs failed
	InvalidContaminated Invalidity = "contaminated"  // other clients' requests moved the counters
)
