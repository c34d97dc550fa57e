package record

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// orderedObject encodes a JSON object with its keys in the order given: records keep the
// seed records' order (schema first, sources last) although step ids are keys.
type orderedObject []keyValue

type keyValue struct {
	key   string
	value any
}

func (o *orderedObject) add(key string, v any) { *o = append(*o, keyValue{key, v}) }

func (o orderedObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, kv := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(kv.key)
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(kv.value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kv.key, err)
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// rawObject is a decoded JSON object: its keys in order and their raw values.
type rawObject struct {
	keys   []string
	values map[string]json.RawMessage
}

func decodeObject(data []byte) (rawObject, error) {
	o := rawObject{values: map[string]json.RawMessage{}}
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil {
		return o, err
	} else if t != json.Delim('{') {
		return o, fmt.Errorf("want a JSON object, got %v", t)
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return o, err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return o, err
		}
		k := t.(string)
		if _, dup := o.values[k]; !dup {
			o.keys = append(o.keys, k)
		}
		o.values[k] = raw
	}
	_, err := dec.Token()
	return o, err
}

// decode reads key into v when present; it reports whether the key was there.
func (o rawObject) decode(key string, v any) (bool, error) {
	raw, ok := o.values[key]
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("%s: %w", key, err)
	}
	return true, nil
}

// marshalKeyed encodes items as one object keyed by each item's name, in order.
func marshalKeyed[T any](items []T, name func(T) string) ([]byte, error) {
	var o orderedObject
	for _, it := range items {
		o.add(name(it), it)
	}
	return o.MarshalJSON()
}

// unmarshalKeyed decodes an object of items keyed by name, in order, naming each.
func unmarshalKeyed[T any](data []byte, setName func(*T, string)) ([]T, error) {
	o, err := decodeObject(data)
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(o.keys))
	for _, k := range o.keys {
		var it T
		if _, err := o.decode(k, &it); err != nil {
			return nil, err
		}
		setName(&it, k)
		out = append(out, it)
	}
	return out, nil
}
