// Package gguf reads and writes GGUF v3 files, the model format of llama.cpp, as far as
// kvbench needs: all metadata value types, tensor infos, and f32/f16 tensor data.
// Spec: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Magic is "GGUF" read as a little-endian uint32.
const Magic = 0x46554747

// Version is the GGUF version this package writes.
const Version = 3

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// ValueType is the type tag of a metadata value.
type ValueType uint32

// Metadata value types, numbered as in the spec.
const (
	TypeUint8 ValueType = iota
	TypeInt8
	TypeUint16
	TypeInt16
	TypeUint32
	TypeInt32
	TypeFloat32
	TypeBool
	TypeString
	TypeArray
	TypeUint64
	TypeInt64
	TypeFloat64
)

// TensorType is a ggml tensor element type; only the two this package writes are named.
type TensorType uint32

// Tensor element types, numbered as in ggml.h.
const (
	TensorF32 TensorType = 0
	TensorF16 TensorType = 1
)

// ErrFormat reports input that is not a GGUF file this package understands.
var ErrFormat = errors.New("gguf: bad format")

// Value is one metadata value. Data holds the Go type matching Type: uint8, int8, uint16,
// int16, uint32, int32, float32, bool, string, uint64, int64, float64; for TypeArray, Elem
// names the element type and Data is a slice of that Go type ([]Value for nested arrays).
type Value struct {
	Type ValueType
	Elem ValueType
	Data any
}

// KV is one metadata entry. Order matters to readers that dump the file, so File keeps a
// slice rather than a map.
type KV struct {
	Key   string
	Value Value
}

// TensorInfo describes one tensor. Dims lists ne0 first (the fastest-varying dimension).
// Offset is relative to the start of the data section; it is filled in by Write.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   TensorType
	Offset uint64
}

// Tensor is a tensor with its raw little-endian data.
type Tensor struct {
	TensorInfo
	Data []byte
}

// File is a GGUF file's metadata and tensors. Read fills Infos and leaves Tensors empty.
type File struct {
	KV      []KV
	Infos   []TensorInfo
	Tensors []Tensor
}

// Get returns the value stored under key.
func (f *File) Get(key string) (Value, bool) {
	for _, kv := range f.KV {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return Value{}, false
}

// String returns a scalar value of the Go types above, or a short summary of an array.
func (v Value) String() string {
	if v.Type != TypeArray {
		return fmt.Sprint(v.Data)
	}
	return fmt.Sprintf("array[%d] of type %d", arrayLen(v.Data), v.Elem)
}

func arrayLen(data any) int {
	switch s := data.(type) {
	case []uint8:
		return len(s)
	case []int8:
		return len(s)
	case []uint16:
		return len(s)
	case []int16:
		return len(s)
	case []uint32:
		return len(s)
	case []int32:
		return len(s)
	case []float32:
		return len(s)
	case []bool:
		return len(s)
	case []string:
		return len(s)
	case []uint64:
		return len(s)
	case []int64:
		return len(s)
	case []float64:
		return len(s)
	case []Value:
		return len(s)
	}
	return -1
}

// Read parses the header, metadata and tensor infos of a GGUF file; it does not read
// tensor data.
func Read(r io.Reader) (*File, error) {
	d := &decoder{r: bufio.NewReaderSize(r, 1<<20)}
	magic, version := d.u32(), d.u32()
	if d.err != nil {
		return nil, fmt.Errorf("reading gguf header: %w", d.err)
	}
	if magic != Magic {
		return nil, fmt.Errorf("%w: magic %#x", ErrFormat, magic)
	}
	if version != 2 && version != 3 {
		return nil, fmt.Errorf("%w: version %d", ErrFormat, version)
	}
	nTensors, nKV := d.u64(), d.u64()
	// Bound counts so a corrupt header cannot make us allocate without limit.
	if nTensors > 1<<20 || nKV > 1<<20 {
		return nil, fmt.Errorf("%w: %d tensors, %d keys", ErrFormat, nTensors, nKV)
	}
	f := &File{}
	for i := uint64(0); i < nKV && d.err == nil; i++ {
		key := d.str()
		t := ValueType(d.u32())
		v := d.value(t)
		if d.err != nil {
			return nil, fmt.Errorf("reading gguf key %d (%q): %w", i, key, d.err)
		}
		f.KV = append(f.KV, KV{Key: key, Value: v})
	}
	for i := uint64(0); i < nTensors && d.err == nil; i++ {
		var ti TensorInfo
		ti.Name = d.str()
		nDims := d.u32()
		if nDims > 8 {
			return nil, fmt.Errorf("%w: tensor %q has %d dims", ErrFormat, ti.Name, nDims)
		}
		for range nDims {
			ti.Dims = append(ti.Dims, d.u64())
		}
		ti.Type = TensorType(d.u32())
		ti.Offset = d.u64()
		f.Infos = append(f.Infos, ti)
	}
	if d.err != nil {
		return nil, fmt.Errorf("reading gguf tensor infos: %w", d.err)
	}
	return f, nil
}

type decoder struct {
	r   *bufio.Reader
	err error
	buf [8]byte
}

func (d *decoder) read(n int) []byte {
	if d.err != nil {
		return d.buf[:n]
	}
	_, d.err = io.ReadFull(d.r, d.buf[:n])
	return d.buf[:n]
}

func (d *decoder) u8() uint8   { return d.read(1)[0] }
func (d *decoder) u16() uint16 { return binary.LittleEndian.Uint16(d.read(2)) }
func (d *decoder) u32() uint32 { return binary.LittleEndian.Uint32(d.read(4)) }
func (d *decoder) u64() uint64 { return binary.LittleEndian.Uint64(d.read(8)) }

func (d *decoder) str() string {
	n := d.u64()
	if d.err != nil {
		return ""
	}
	if n > 1<<24 {
		d.err = fmt.Errorf("%w: string of %d bytes", ErrFormat, n)
		return ""
	}
	b := make([]byte, n)
	_, d.err = io.ReadFull(d.r, b)
	return string(b)
}

func (d *decoder) value(t ValueType) Value {
	v := Value{Type: t}
	switch t {
	case TypeUint8:
		v.Data = d.u8()
	case TypeInt8:
		v.Data = int8(d.u8())
	case TypeUint16:
		v.Data = d.u16()
	case TypeInt16:
		v.Data = int16(d.u16())
	case TypeUint32:
		v.Data = d.u32()
	case TypeInt32:
		v.Data = int32(d.u32())
	case TypeFloat32:
		v.Data = math.Float32frombits(d.u32())
	case TypeBool:
		v.Data = d.u8() != 0
	case TypeString:
		v.Data = d.str()
	case TypeUint64:
		v.Data = d.u64()
	case TypeInt64:
		v.Data = int64(d.u64())
	case TypeFloat64:
		v.Data = math.Float64frombits(d.u64())
	case TypeArray:
		v.Elem = ValueType(d.u32())
		n := d.u64()
		if n > 1<<24 {
			d.err = fmt.Errorf("%w: array of %d elements", ErrFormat, n)
			return v
		}
		v.Data = d.array(v.Elem, int(n))
	default:
		if d.err == nil {
			d.err = fmt.Errorf("%w: value type %d", ErrFormat, t)
		}
	}
	return v
}

// array decodes n elements into a typed slice, so large token tables stay compact.
func (d *decoder) array(elem ValueType, n int) any {
	switch elem {
	case TypeString:
		s := make([]string, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			s = append(s, d.str())
		}
		return s
	case TypeInt32:
		s := make([]int32, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			s = append(s, int32(d.u32()))
		}
		return s
	case TypeUint32:
		s := make([]uint32, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			s = append(s, d.u32())
		}
		return s
	case TypeFloat32:
		s := make([]float32, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			s = append(s, math.Float32frombits(d.u32()))
		}
		return s
	}
	// Rare element types go through the generic path.
	vals := make([]Value, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		vals = append(vals, d.value(elem))
	}
	return typedSlice(elem, vals)
}

// typedSlice turns scalar values into the typed slice Value documents; nested arrays stay
// []Value.
func typedSlice(elem ValueType, vals []Value) any {
	switch elem {
	case TypeUint8:
		return collect[uint8](vals)
	case TypeInt8:
		return collect[int8](vals)
	case TypeUint16:
		return collect[uint16](vals)
	case TypeInt16:
		return collect[int16](vals)
	case TypeBool:
		return collect[bool](vals)
	case TypeUint64:
		return collect[uint64](vals)
	case TypeInt64:
		return collect[int64](vals)
	case TypeFloat64:
		return collect[float64](vals)
	}
	return vals
}

func collect[T any](vals []Value) []T {
	out := make([]T, len(vals))
	for i, v := range vals {
		out[i], _ = v.Data.(T)
	}
	return out
}

// Write encodes f as a GGUF v3 file: header, metadata, tensor infos, then each tensor's
// data at an offset aligned to general.alignment (DefaultAlignment when absent). It sets
// the Offset of each tensor in f.Tensors; f.Infos is ignored.
func Write(w io.Writer, f *File) error {
	align := uint64(DefaultAlignment)
	if v, ok := f.Get("general.alignment"); ok {
		a, ok := v.Data.(uint32)
		if !ok || a == 0 || a%8 != 0 {
			return fmt.Errorf("gguf: general.alignment must be a uint32 multiple of 8, got %v", v.Data)
		}
		align = uint64(a)
	}
	var off uint64
	for i := range f.Tensors {
		t := &f.Tensors[i]
		t.Offset = off
		off = alignUp(off+uint64(len(t.Data)), align)
	}

	e := &encoder{w: bufio.NewWriterSize(w, 1<<20)}
	e.u32(Magic)
	e.u32(Version)
	e.u64(uint64(len(f.Tensors)))
	e.u64(uint64(len(f.KV)))
	for _, kv := range f.KV {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.Type))
		if err := e.value(kv.Value); err != nil {
			return fmt.Errorf("writing gguf key %q: %w", kv.Key, err)
		}
	}
	for _, t := range f.Tensors {
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(t.Offset)
	}
	e.pad(align)
	e.n = 0 // offsets count from the start of the data section
	for _, t := range f.Tensors {
		e.bytes(t.Data)
		e.pad(align)
	}
	if e.err != nil {
		return fmt.Errorf("writing gguf: %w", e.err)
	}
	if err := e.w.Flush(); err != nil {
		return fmt.Errorf("writing gguf: %w", err)
	}
	return nil
}

func alignUp(n, align uint64) uint64 { return (n + align - 1) / align * align }

type encoder struct {
	w   *bufio.Writer
	n   uint64
	err error
	buf [8]byte
}

func (e *encoder) bytes(b []byte) {
	if e.err != nil {
		return
	}
	var n int
	n, e.err = e.w.Write(b)
	e.n += uint64(n)
}

func (e *encoder) pad(align uint64) {
	if p := alignUp(e.n, align) - e.n; p > 0 {
		e.bytes(make([]byte, p))
	}
}

func (e *encoder) u8(v uint8) { e.buf[0] = v; e.bytes(e.buf[:1]) }
func (e *encoder) u16(v uint16) {
	binary.LittleEndian.PutUint16(e.buf[:], v)
	e.bytes(e.buf[:2])
}
func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.buf[:], v)
	e.bytes(e.buf[:4])
}
func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.buf[:], v)
	e.bytes(e.buf[:8])
}
func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.bytes([]byte(s))
}

func (e *encoder) value(v Value) error {
	switch x := v.Data.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case bool:
		if x {
			e.u8(1)
		} else {
			e.u8(0)
		}
	case string:
		e.str(x)
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	default:
		if v.Type != TypeArray {
			return fmt.Errorf("unsupported value %T for type %d", v.Data, v.Type)
		}
		return e.array(v)
	}
	if want := typeOf(v.Data); want != v.Type {
		return fmt.Errorf("value %T does not match type %d", v.Data, v.Type)
	}
	return nil
}

func (e *encoder) array(v Value) error {
	n := arrayLen(v.Data)
	if n < 0 {
		return fmt.Errorf("unsupported array %T", v.Data)
	}
	e.u32(uint32(v.Elem))
	e.u64(uint64(n))
	if vals, ok := v.Data.([]Value); ok {
		for _, x := range vals {
			if x.Type != v.Elem {
				return fmt.Errorf("array element of type %d in array of type %d", x.Type, v.Elem)
			}
			if err := e.value(x); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	each(v.Data, func(x any) {
		if err == nil && typeOf(x) != v.Elem {
			err = fmt.Errorf("array element %T in array of type %d", x, v.Elem)
		}
		if err == nil {
			err = e.value(Value{Type: v.Elem, Data: x})
		}
	})
	return err
}

func each(data any, fn func(any)) {
	switch s := data.(type) {
	case []uint8:
		eachOf(s, fn)
	case []int8:
		eachOf(s, fn)
	case []uint16:
		eachOf(s, fn)
	case []int16:
		eachOf(s, fn)
	case []uint32:
		eachOf(s, fn)
	case []int32:
		eachOf(s, fn)
	case []float32:
		eachOf(s, fn)
	case []bool:
		eachOf(s, fn)
	case []string:
		eachOf(s, fn)
	case []uint64:
		eachOf(s, fn)
	case []int64:
		eachOf(s, fn)
	case []float64:
		eachOf(s, fn)
	}
}

func eachOf[T any](s []T, fn func(any)) {
	for _, x := range s {
		fn(x)
	}
}

func typeOf(x any) ValueType {
	switch x.(type) {
	case uint8:
		return TypeUint8
	case int8:
		return TypeInt8
	case uint16:
		return TypeUint16
	case int16:
		return TypeInt16
	case uint32:
		return TypeUint32
	case int32:
		return TypeInt32
	case float32:
		return TypeFloat32
	case bool:
		return TypeBool
	case string:
		return TypeString
	case uint64:
		return TypeUint64
	case int64:
		return TypeInt64
	case float64:
		return TypeFloat64
	}
	return TypeArray
}

// F32Bytes encodes values as little-endian float32 tensor data.
func F32Bytes(vals []float32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// F16Bytes encodes values as little-endian IEEE half-precision tensor data.
func F16Bytes(vals []float32) []byte {
	b := make([]byte, 2*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint16(b[2*i:], Float16(v))
	}
	return b
}

// Float16 converts f to IEEE 754 half precision, rounding to nearest even; values beyond
// the half range become infinities.
func Float16(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exp := int32(bits>>23&0xff) - 127 + 15
	mant := bits & 0x7fffff
	switch {
	case bits&0x7fffffff == 0:
		return sign
	case bits>>23&0xff == 0xff: // inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp >= 0x1f:
		return sign | 0x7c00
	case exp <= 0:
		// Subnormal half: shift the full significand into place, rounding to even.
		if exp < -10 {
			return sign
		}
		m := mant | 0x800000
		shift := uint32(14 - exp)
		half := m >> shift
		rem := m & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && half&1 == 1) {
			half++
		}
		return sign | uint16(half)
	}
	h := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is the correct rounding
	}
	return sign | uint16(h)
}
