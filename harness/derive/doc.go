// Package derive computes what a run record holds that its steps decide, one way for a run
// that just ended and a run read back from disk: a step's span and samples from its artifact
// (Assemble), each step's section, the repeats summary, the reload curve, the offload gain
// over the cold twin, reload fidelity and the warm-cache findings (Run.Derive). Package record
// is the schema these fill; derive is where the rules live.
package derive
