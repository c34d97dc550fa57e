package runs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// recordPerm is the mode of every record and journal kvbench writes: prompts, responses and
// server details stay private to the user who ran it.
const recordPerm fs.FileMode = 0o600

// atomicWrite is the one way kvbench puts a file on disk. What write produces goes to a
// temp file in path's directory, which is given mode perm and fsynced, then moved into place
// and the directory fsynced, so path is either as it was or complete and durable. With
// replace false an existing file is refused (the temp file is linked, which fails where a
// file appeared meanwhile and rename would silently replace it); with replace true it is
// renamed over the file there. The temp file never outlives the call. It returns the sha256
// of the bytes written; errors name path, not the hidden temp file.
func atomicWrite(path string, replace bool, perm fs.FileMode, write func(io.Writer) error) (string, error) {
	p, err := createPending(path, replace, perm)
	if err != nil {
		return "", err
	}
	if err := write(p); err != nil {
		p.Abort()
		return "", p.fail(err)
	}
	return p.Commit()
}

// Pending is a file atomicWrite is writing, for a writer that streams over a long time (a
// CPU profile of a whole run): written under a temp name beside its path, it is put in
// place by Commit or removed by Abort.
type Pending struct {
	f       *os.File
	path    string
	replace bool
	perm    fs.FileMode
	sum     hash.Hash
	done    bool
}

func createPending(path string, replace bool, perm fs.FileMode) (*Pending, error) {
	p := &Pending{path: path, replace: replace, perm: perm, sum: sha256.New()}
	if !replace {
		if _, err := os.Lstat(path); err == nil {
			return nil, fmt.Errorf("writing %s: %w", path, fs.ErrExist)
		}
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, p.fail(err)
	}
	p.f = f
	return p, nil
}

func (p *Pending) fail(err error) error {
	return fmt.Errorf("writing %s: %w", p.path, withoutTempName(err))
}

// Write writes to the temp file.
func (p *Pending) Write(b []byte) (int, error) {
	p.sum.Write(b)
	return p.f.Write(b)
}

// Abort removes the temp file; path stays as it was. It is a no-op after Commit.
func (p *Pending) Abort() {
	if p.done {
		return
	}
	p.done = true
	p.f.Close()
	os.Remove(p.f.Name())
}

// Commit gives the file its mode, fsyncs it, moves it to its path (link or rename) and
// fsyncs the directory; the temp file is gone afterwards whatever happened. It returns the
// sha256 of the bytes written.
func (p *Pending) Commit() (string, error) {
	if p.done {
		return "", p.fail(os.ErrClosed)
	}
	p.done = true
	tmp := p.f.Name()
	defer os.Remove(tmp) // after a link the temp name goes; after a rename, a no-op
	err := p.f.Chmod(p.perm)
	if err == nil {
		err = p.f.Sync()
	}
	if cerr := p.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", p.fail(err)
	}
	if p.replace {
		err = os.Rename(tmp, p.path)
	} else {
		err = os.Link(tmp, p.path)
	}
	if err != nil {
		return "", p.fail(err)
	}
	if err := syncDir(filepath.Dir(p.path)); err != nil {
		return "", p.fail(err)
	}
	return hex.EncodeToString(p.sum.Sum(nil)), nil
}

// renameDir moves the directory tmp to dir and fsyncs parent, where both live. rename
// replaces only an empty directory, so a dir another run filled meanwhile fails with
// ENOTEMPTY or EEXIST, which the caller takes as "try the next name".
func renameDir(tmp, dir, parent string) error {
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	return syncDir(parent)
}

// syncDir fsyncs a directory, so a file created or renamed in it survives a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// withoutTempName drops the operation and file names of err, which name the hidden temp file
// rather than the path the user gave; the cause (no such directory, permission denied) stays.
func withoutTempName(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}
