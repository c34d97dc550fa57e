package metrics

import (
	"slices"
	"strings"
)

// cacheWords are the words in a family's name that say it may be about the KV cache, its
// tiers or its transfers: a family named so that the profile does not read is listed as
// unread (UnreadFamilies), so a verdict reached without it says so.
var cacheWords = []string{"cache", "prefix", "hit", "offload", "load", "store", "evict", "prefetch", "tier", "disk", "storage", "kv"}

// UnreadFamilies lists, sorted, the families of e (with samples or only HELP and TYPE lines)
// whose name speaks of the KV cache (cacheWords) and that p reads nothing from: none of its
// counter or gauge selectors, its cache config family or a sibling that makes a family live.
// A new engine version's families show up here until the engine model learns them. Never
// nil.
func (p Profile) UnreadFamilies(e Exposition) []string {
	read := p.readFamilies()
	names := map[string]bool{}
	for name := range e.families {
		names[name] = true
	}
	for name := range e.declared {
		names[name] = true
	}
	out := []string{}
	for name := range names {
		if read[name] || !speaksOfCache(name) {
			continue
		}
		// prometheus_client prints a counter's creation time as its own family.
		if base, ok := strings.CutSuffix(name, "_created"); ok && (read[base+"_total"] || read[base]) {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// readFamilies are the families p reads a value or a presence from.
func (p Profile) readFamilies() map[string]bool {
	read := map[string]bool{}
	add := func(sels []Selector) {
		for _, s := range sels {
			read[s.Metric] = true
			if base, ok := strings.CutSuffix(s.Metric, "_sum"); ok {
				read[base] = true // a histogram's or summary's sum
			}
		}
	}
	for _, sels := range p.Counters {
		add(sels)
	}
	for _, sels := range p.Gauges {
		add(sels)
	}
	for _, sels := range p.LiveWhen {
		add(sels)
	}
	if p.CacheInfo != "" {
		read[p.CacheInfo] = true
	}
	return read
}

func speaksOfCache(name string) bool {
	lower := strings.ToLower(name)
	return slices.ContainsFunc(cacheWords, func(w string) bool { return strings.Contains(lower, w) })
}

// mergeUnread is the sorted union of the snapshots' unread families.
func mergeUnread(snaps []Snapshot) []string {
	out := []string{}
	for _, s := range snaps {
		for _, f := range s.UnreadFamilies {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	slices.Sort(out)
	return out
}
