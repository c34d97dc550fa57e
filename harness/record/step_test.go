package record

import ()

func isolated(id string, reqs ...Request) StepArtifact {
	for i := range reqs {
		reqs[i].Step, reqs[i].IndexInStep = id, i
	}
	return StepArtifact{Schema: StepSchema, Step: id, Kind: KindSequence, DeltaScope: ScopeRequest, Requests: reqs}
}
