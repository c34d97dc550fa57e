package runs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("writing %s: %w", path, withoutTempName(err))
	}
	if !replace {
		if _, err := os.Lstat(path); err == nil {
			return "", fmt.Errorf("writing %s: %w", path, fs.ErrExist)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fail(err)
	}
	defer os.Remove(tmp.Name()) // after a link the temp name goes; after a rename, a no-op
	sum := sha256.New()
	err = write(io.MultiWriter(tmp, sum))
	if err == nil {
		err = tmp.Chmod(perm)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	if replace {
		err = os.Rename(tmp.Name(), path)
	} else {
		err = os.Link(tmp.Name(), path)
	}
	if err != nil {
		return fail(err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fail(err)
	}
	return hex.EncodeToString(sum.Sum(nil)), nil
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
