module github.com/anvil-serving/kvbench

go 1.26.0

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/prometheus/client_model v0.6.3
	github.com/prometheus/common v0.74.0
	github.com/sashabaranov/go-openai v1.43.0
	golang.org/x/sync v0.25.0
)

require (
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pandatix/go-abnf v0.5.5 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
