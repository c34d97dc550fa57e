package record

import ()

// coldRequest is a sequence request of tokens prompt tokens behind a 128-token shared
// prefix; cached < 0 leaves usage's cached tokens absent.
func coldRequest(tokens, cached int) Request {
	q := Request{Prompt: Prompt{Tokens: tokens, SharedPrefixTokens: 128}, Result: Result{PromptTokens: i(tokens)}}
	if cached >= 0 {
		q.Result.CachedPromptTokens = i(cached)
	}
	return q
}

func keysOf[V any](m map[int]V) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}
