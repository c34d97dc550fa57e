package client

// DecodeTokensPerSecond is (outputTokens - 1) / (endToEnd - timeToFirstOutput), as
// docs/domain.md defines it: the first token belongs to prefill. It is nil when a timing is
// absent, no token was generated, or the decode interval is not positive.
func DecodeTokensPerSecond(outputTokens int, timeToFirstOutputMS, endToEndMS *float64) *float64 {
	if outputTokens < 1 || timeToFirstOutputMS == nil || endToEndMS == nil {
		return nil
	}
	decodeSeconds := (*endToEndMS - *timeToFirstOutputMS) / 1000
	if !(decodeSeconds > 0) {
		return nil
	}
	rate := float64(outputTokens-1) / decodeSeconds
	return &rate
}

// EffectivePrefillTokensPerSecond is promptTokens / timeToFirstOutput. Prompt tokens
// served from a cache count too, hence "effective". It is nil when an input is absent or
// the time to first output is not positive.
func EffectivePrefillTokensPerSecond(promptTokens *int, timeToFirstOutputMS *float64) *float64 {
	if promptTokens == nil || timeToFirstOutputMS == nil {
		return nil
	}
	seconds := *timeToFirstOutputMS / 1000
	if !(seconds > 0) {
		return nil
	}
	rate := float64(*promptTokens) / seconds
	return &rate
}
