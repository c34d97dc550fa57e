package record

// Study is a merged study record (seed 001): the same schema as a run record, holding the
// sections of several runs: each primary run's steps under their ids and each control run's
// summary under its study key, with every file they came from in sources.
type Study struct {
	Schema     string
	ObservedAt string
	Model      Model
	Runtime    Runtime
	Topology   map[string]any
	Cache      Cache
	Sections   []StudySection
	Artifacts  []ArtifactRef
	References []Source
}

// StudySection is one section of a study: a step's (Section) or a control run's (Control,
// under Key).
type StudySection struct {
	Key     string
	Section *Section
	Control *ControlSection
}

// MarshalJSON writes the study in the seed record's key order.
func (s *Study) MarshalJSON() ([]byte, error) {
	var o orderedObject
	o.add("schema", s.Schema)
	o.add("observed_at", s.ObservedAt)
	o.add("model", s.Model)
	o.add("runtime", s.Runtime)
	if s.Topology != nil {
		o.add("topology", s.Topology)
	} else {
		o.add("topology", map[string]any{})
	}
	o.add("cache", s.Cache)
	for _, sec := range s.Sections {
		if sec.Control != nil {
			o.add(sec.Key, sec.Control)
		} else {
			o.add(sec.Key, sec.Section.value())
		}
	}
	o.add("sources", sources(s.Artifacts, s.References))
	return o.MarshalJSON()
}
