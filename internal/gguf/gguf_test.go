package gguf

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"testing"
)

func TestWriteReadRoundTrip(t *testing.T) {
	in := &File{
		KV: []KV{
			{Key: "general.architecture", Value: Value{Type: TypeString, Data: "qwen2"}},
			{Key: "general.alignment", Value: Value{Type: TypeUint32, Data: uint32(32)}},
			{Key: "f", Value: Value{Type: TypeFloat32, Data: float32(1e-6)}},
			{Key: "b", Value: Value{Type: TypeBool, Data: true}},
			{Key: "i8", Value: Value{Type: TypeInt8, Data: int8(-3)}},
			{Key: "u64", Value: Value{Type: TypeUint64, Data: uint64(1 << 40)}},
			{Key: "tokens", Value: Value{Type: TypeArray, Elem: TypeString, Data: []string{"a", "Ġb", ""}}},
			{Key: "types", Value: Value{Type: TypeArray, Elem: TypeInt32, Data: []int32{1, 3, -1}}},
			{Key: "flags", Value: Value{Type: TypeArray, Elem: TypeBool, Data: []bool{true, false}}},
		},
		Tensors: []Tensor{
			{TensorInfo: TensorInfo{Name: "a", Dims: []uint64{3}, Type: TensorF32}, Data: F32Bytes([]float32{1, 2, 3})},
			{TensorInfo: TensorInfo{Name: "b", Dims: []uint64{2, 2}, Type: TensorF16}, Data: F16Bytes([]float32{1, -2, 0.5, 0})},
		},
	}
	var buf bytes.Buffer
	if err := Write(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out.KV, in.KV) {
		t.Errorf("metadata changed in the round trip:\n got %+v\nwant %+v", out.KV, in.KV)
	}
	if len(out.Infos) != 2 {
		t.Fatalf("got %d tensor infos, want 2", len(out.Infos))
	}
	// Tensor a is 12 bytes, so b starts at the next multiple of 32.
	if out.Infos[0].Offset != 0 || out.Infos[1].Offset != 32 {
		t.Errorf("offsets %d, %d; want 0, 32", out.Infos[0].Offset, out.Infos[1].Offset)
	}
	if got, want := out.Infos[1].Dims, []uint64{2, 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("dims %v, want %v", got, want)
	}
	// The data section starts aligned and ends with tensor b's padded data.
	if buf.Len()%32 != 0 {
		t.Errorf("file length %d not a multiple of the alignment", buf.Len())
	}
	tail := buf.Bytes()[buf.Len()-32:]
	if got := binary.LittleEndian.Uint16(tail[2:]); got != 0xc000 {
		t.Errorf("f16 of -2 in the file = %#04x, want 0xc000", got)
	}
}

func TestReadRejectsBadMagic(t *testing.T) {
	if _, err := Read(bytes.NewReader([]byte("GGML\x03\x00\x00\x00"))); err == nil {
		t.Fatal("Read accepted a file with magic GGML")
	}
}

func TestFloat16(t *testing.T) {
	tests := []struct {
		in   float32
		want uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{0.5, 0x3800},
		{65504, 0x7bff},                 // largest half
		{65520, 0x7c00},                 // rounds up to infinity
		{float32(math.Inf(1)), 0x7c00},  // infinity stays infinity
		{6.103515625e-05, 0x0400},       // smallest normal half
		{5.960464477539063e-08, 0x0001}, // smallest subnormal half
		{2.98e-08, 0x0000},              // below half the smallest subnormal
		{1.0009765625, 0x3c01},          // 1 + 2^-10, exact
		{1.00048828125, 0x3c00},         // halfway, rounds to even
		{1.00146484375, 0x3c02},         // halfway, rounds to even (up)
		{0.0200042724609375, 0x251f},
	}
	for _, tt := range tests {
		if got := Float16(tt.in); got != tt.want {
			t.Errorf("Float16(%g) = %#04x, want %#04x", tt.in, got, tt.want)
		}
	}
}
