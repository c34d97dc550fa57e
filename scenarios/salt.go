package scenarios

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// RandomSalt is the salt value that draws a fresh salt for each run.
const RandomSalt = "random"

// MaxSaltBytes bounds a salt: it is written into records and, where the engine isolates
// its cache by a request field, sent with every request.
const MaxSaltBytes = 64

// CheckSalt reports what is wrong with salt as a prompt salt: "" (none), "random", or up to
// MaxSaltBytes of letters, digits, '.', '-' and '_'.
func CheckSalt(salt string) error {
	if len(salt) > MaxSaltBytes {
		return fmt.Errorf("is %d bytes long; at most %d", len(salt), MaxSaltBytes)
	}
	for _, r := range salt {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return fmt.Errorf("%q must be letters, digits, '.', '-' and '_' (or %q for a fresh one each run)", salt, RandomSalt)
		}
	}
	return nil
}

// ResolveSalt draws the run's salt when the scenario asks for a random one, so that the
// plan, every request and the record use the same one.
func (s *Scenario) ResolveSalt() error {
	if s.Prompt.Salt != RandomSalt {
		return nil
	}
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("drawing a random prompt salt: %w", err)
	}
	s.Prompt.Salt = hex.EncodeToString(b)
	return nil
}
