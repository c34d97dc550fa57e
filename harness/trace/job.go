package trace

import (
	"context"
	"flag"
	"fmt"
	"io"
)

// Report is what a file subcommand of kvbench trace prints: JSON (its Schema) or text.
type Report interface {
	WriteText(w io.Writer) error
}

// FileJob is a kvbench trace subcommand over one trace file, its flags parsed.
type FileJob struct {
	Schema string
	Run    func(ctx context.Context) (Report, error)
}

// oneFile checks that the arguments left after the flags are one trace file.
func oneFile(args []string) (string, error) {
	if len(args) != 1 {
		return "", fmt.Errorf("want one trace file, got %d arguments", len(args))
	}
	return args[0], nil
}

// AnalyzeJob registers trace analyze's flags (RegisterAnalyzeFlags) and gives its job over the arguments left after them.
func AnalyzeJob(fs *flag.FlagSet) func(args []string) (FileJob, error) {
	flags := RegisterAnalyzeFlags(fs)
	return func(args []string) (FileJob, error) {
		path, err := oneFile(args)
		if err != nil {
			return FileJob{}, err
		}
		cfg, w, err := flags()
		return FileJob{Schema: AnalysisSchema, Run: func(ctx context.Context) (Report, error) {
			return AnalyzeFile(ctx, path, w, cfg)
		}}, err
	}
}

// SizeJob registers trace size's flags (RegisterSizeFlags) and gives its job over the arguments left after them.
func SizeJob(fs *flag.FlagSet) func(args []string) (FileJob, error) {
	flags := RegisterSizeFlags(fs)
	return func(args []string) (FileJob, error) {
		path, err := oneFile(args)
		if err != nil {
			return FileJob{}, err
		}
		cfg, w, err := flags()
		return FileJob{Schema: SizeSchema, Run: func(ctx context.Context) (Report, error) {
			return SizeFile(ctx, path, w, cfg)
		}}, err
	}
}

// AnalyzeExamples and SizeExamples are the examples of their subcommands' help.
const (
	AnalyzeExamples = "kvbench trace analyze conversation_trace.jsonl\n" +
		"kvbench trace analyze conversation_trace.jsonl --capacity-tokens 1e6,3e6,1e7 --gpu-tokens 1e6 --host-tokens 1e7 --format json\n" +
		"kvbench trace analyze conversation_trace.jsonl --start 10m --duration 5m --max-input-tokens 32768"
	SizeExamples = "kvbench trace size conversation_trace.jsonl --gpu-tokens 1e6 --host 0,1e6,1e7,3e7\n" +
		"kvbench trace size conversation_trace.jsonl --gpu-tokens 1e6 --bytes-per-token 131072 --host 0,8GiB,16GiB,32GiB --policy vllm:store_threshold=2 --format json\n" +
		"kvbench trace size conversation_trace.jsonl --gpu-tokens 1e6 --host 0,1e6,1e7,3e7 --curve results/reload-curve-20261201T060008Z --gpu-hour-cost 2.5 --html size.html\n" +
		"kvbench trace size --calibrate runs/my-trace-20260101T000000Z   # the run's trace, pool and deployed size; the policy fitted to what it measured"
)
