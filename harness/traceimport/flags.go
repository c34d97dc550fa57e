package traceimport

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/trace"
)

// Job is one kvbench trace import as its flags ask for it: a log, the tokenizer it goes
// through, the options and the new file the trace goes to.
type Job struct {
	Log, Out string
	Options  Options
	// Tokenizer is where the prompts go; Where is its URL, credentials redacted.
	Tokenizer Tokenizer
	Where     string
	// Format is how the command prints the report (text or json); the CLI registers it.
	Format string
	flags  func() error
}

// OutputError is a trace that could not be written to Job.Out: the file exists, its
// directory does not, or the write failed.
type OutputError struct{ Err error }

func (e *OutputError) Error() string { return e.Err.Error() }
func (e *OutputError) Unwrap() error { return e.Err }

// WriteFailed returns the error writing Job.Out that err holds, if it holds one.
func WriteFailed(err error) (error, bool) {
	var oe *OutputError
	if errors.As(err, &oe) {
		return oe.Err, true
	}
	return nil, false
}

// RegisterFlags adds kvbench trace import's flags to fs. Once fs is parsed, Job.Check takes
// the command's arguments and checks the lot; its errors are bad input, one line naming the
// flag. Nothing is sent before Run reads the log's first line.
func RegisterFlags(fs *flag.FlagSet) *Job {
	j := &Job{}
	o := &j.Options
	fs.StringVar(&j.Out, "o", "", "write the trace to this new file (never overwritten; nothing is written when a line of the log is bad)")
	endpoint := fs.String("endpoint", "", "the server whose tokenizer and chat template the prompts go through: its OpenAI base URL, e.g. http://127.0.0.1:8000/v1 (POST /tokenize at its root)")
	backend := fs.String("backend", engine.Default, "the --endpoint's engine, which says how its /tokenize is called: "+strings.Join(engine.Names(), ", "))
	tokenizer := fs.String("tokenizer", "", "instead of --endpoint: the full URL of a tokenize endpoint in vLLM's dialect (POST {model, messages} or {model, prompt}, answering {count, tokens}), e.g. a CPU server of the same model")
	keyEnv := fs.String("api-key-env", "", "send the API key held in this environment variable (never printed)")
	timeout := fs.Duration("timeout", 30*time.Second, "limit for each tokenize call")
	fs.IntVar(&o.BlockTokens, "block-tokens", trace.DefaultBlockTokens, "tokens per hash id: the server's KV block size or a multiple of it")
	fs.Float64Var(&o.Rate, "rate", 0, "space the requests evenly at this many a second in the log's order, ignoring logged timestamps (needed when the log has none)")
	fs.StringVar(&o.Model, "model", "", "tokenize every prompt for this model instead of each line's model field (the server's served name)")
	fs.IntVar(&o.Concurrency, "concurrency", 8, "tokenize calls in flight at once")
	fs.IntVar(&o.OutputTokens, "output-tokens", 256, "output length of a request whose line gives neither usage.completion_tokens nor max_tokens")
	j.flags = func() error {
		switch {
		case o.BlockTokens < 1:
			return fmt.Errorf("--block-tokens %d must be at least 1", o.BlockTokens)
		case o.Rate < 0 || o.Rate != o.Rate:
			return fmt.Errorf("--rate %g must be above 0", o.Rate)
		case o.OutputTokens < 0 || o.OutputTokens > trace.MaxLengthTokens:
			return fmt.Errorf("--output-tokens %d must be at least 0", o.OutputTokens)
		case o.Concurrency < 1 || o.Concurrency > 1024:
			return fmt.Errorf("--concurrency %d must be 1 to 1024", o.Concurrency)
		case *timeout <= 0:
			return fmt.Errorf("--timeout %s must be above 0", *timeout)
		case (*endpoint == "") == (*tokenizer == ""):
			return errors.New("name the tokenizer with --endpoint URL or --tokenizer URL (one of them)")
		case j.Out == "":
			return errors.New("name the trace file with -o FILE")
		}
		key := ""
		if *keyEnv != "" {
			if key = os.Getenv(*keyEnv); key == "" {
				return fmt.Errorf("--api-key-env %s: the variable is not set", *keyEnv)
			}
		}
		cfg := client.Config{APIKey: key, CallTimeout: *timeout, TokenizeTimeout: *timeout}
		flagName, raw, name := "--endpoint", *endpoint, *backend
		if *tokenizer != "" {
			flagName, raw, name = "--tokenizer", *tokenizer, engine.Default // vLLM's dialect
		}
		def, err := engine.ByName(name)
		if err != nil {
			return fmt.Errorf("--backend: %w", err)
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s %s: want an http:// or https:// URL", flagName, redact.URL(raw))
		}
		cfg.BaseURL = raw
		if *tokenizer != "" {
			// The client posts to its root plus TokenizePath; a root of the scheme and host
			// keeps a path ending in /v1 from being cut.
			cfg.TokenizePath, u.Path, u.RawPath = u.EscapedPath(), "", ""
			if u.RawQuery != "" {
				cfg.TokenizePath += "?" + u.RawQuery
				u.RawQuery = ""
			}
			cfg.BaseURL = u.String()
		}
		j.Tokenizer, j.Where = def.Connect(client.New(cfg), *timeout), redact.URL(raw)
		return nil
	}
	return j
}

// Check takes the command's arguments (the log) and checks the flags.
func (j *Job) Check(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("want one log file, got %d arguments", len(args))
	}
	j.Log = args[0]
	return j.flags()
}

// Run imports the log and writes the trace to Out atomically: a bad line, a failed
// tokenizer or an interrupt leaves no file. Errors writing Out are *OutputError.
func (j *Job) Run(ctx context.Context) (*Report, error) {
	if err := runs.CheckOutput(j.Out, false); err != nil {
		return nil, &OutputError{err} // before the first tokenize call
	}
	t, err := ImportFile(ctx, j.Log, j.Tokenizer, j.Options)
	if err != nil {
		return nil, err
	}
	if _, err := runs.WriteOutputFrom(j.Out, t.WriteJSONL); err != nil {
		return nil, &OutputError{err}
	}
	t.Report.Trace, t.Report.TokenizedBy = j.Out, j.Where
	return &t.Report, nil
}
