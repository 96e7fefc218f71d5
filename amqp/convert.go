package amqp

import (
	"fmt"
	"time"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/proto"
)

// tableToProto converts a field table, keeping each value's wire type.
func tableToProto(t wire.Table) (*proto.Table, error) {
	if t == nil {
		return nil, nil
	}
	out := &proto.Table{Fields: make([]*proto.Field, 0, len(t))}
	for _, f := range t {
		v, err := valueToProto(f.Value)
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", f.Key, err)
		}
		out.Fields = append(out.Fields, &proto.Field{Key: f.Key, Value: v})
	}
	return out, nil
}

func valueToProto(v any) (*proto.Value, error) {
	switch v := v.(type) {
	case nil:
		return &proto.Value{Kind: &proto.Value_Void{Void: true}}, nil
	case bool:
		return &proto.Value{Kind: &proto.Value_Bool{Bool: v}}, nil
	case int8:
		return &proto.Value{Kind: &proto.Value_Int8{Int8: int32(v)}}, nil
	case uint8:
		return &proto.Value{Kind: &proto.Value_Uint8{Uint8: uint32(v)}}, nil
	case int16:
		return &proto.Value{Kind: &proto.Value_Int16{Int16: int32(v)}}, nil
	case uint16:
		return &proto.Value{Kind: &proto.Value_Uint16{Uint16: uint32(v)}}, nil
	case int32:
		return &proto.Value{Kind: &proto.Value_Int32{Int32: v}}, nil
	case uint32:
		return &proto.Value{Kind: &proto.Value_Uint32{Uint32: v}}, nil
	case int64:
		return &proto.Value{Kind: &proto.Value_Int64{Int64: v}}, nil
	case float32:
		return &proto.Value{Kind: &proto.Value_Float32{Float32: v}}, nil
	case float64:
		return &proto.Value{Kind: &proto.Value_Float64{Float64: v}}, nil
	case wire.Decimal:
		return &proto.Value{Kind: &proto.Value_Decimal{Decimal: &proto.Decimal{Scale: uint32(v.Scale), Value: v.Value}}}, nil
	case string:
		return &proto.Value{Kind: &proto.Value_LongString{LongString: []byte(v)}}, nil
	case []byte:
		return &proto.Value{Kind: &proto.Value_ByteArray{ByteArray: v}}, nil
	case time.Time:
		return &proto.Value{Kind: &proto.Value_Timestamp{Timestamp: v.Unix()}}, nil
	case wire.Table:
		t, err := tableToProto(v)
		if err != nil {
			return nil, err
		}
		if t == nil {
			t = &proto.Table{}
		}
		return &proto.Value{Kind: &proto.Value_Table{Table: t}}, nil
	case []any:
		a := &proto.Array{Values: make([]*proto.Value, 0, len(v))}
		for i, e := range v {
			pv, err := valueToProto(e)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			a.Values = append(a.Values, pv)
		}
		return &proto.Value{Kind: &proto.Value_Array{Array: a}}, nil
	}
	return nil, fmt.Errorf("unsupported field value type %T", v)
}

// tableFromProto converts back; a value of an unknown kind becomes void.
func tableFromProto(t *proto.Table) wire.Table {
	if t == nil {
		return nil
	}
	out := make(wire.Table, 0, len(t.GetFields()))
	for _, f := range t.GetFields() {
		out = append(out, wire.Field{Key: f.GetKey(), Value: valueFromProto(f.GetValue())})
	}
	return out
}

func valueFromProto(v *proto.Value) any {
	switch k := v.GetKind().(type) {
	case *proto.Value_Bool:
		return k.Bool
	case *proto.Value_Int8:
		return int8(k.Int8)
	case *proto.Value_Uint8:
		return uint8(k.Uint8)
	case *proto.Value_Int16:
		return int16(k.Int16)
	case *proto.Value_Uint16:
		return uint16(k.Uint16)
	case *proto.Value_Int32:
		return k.Int32
	case *proto.Value_Uint32:
		return k.Uint32
	case *proto.Value_Int64:
		return k.Int64
	case *proto.Value_Float32:
		return k.Float32
	case *proto.Value_Float64:
		return k.Float64
	case *proto.Value_Decimal:
		return wire.Decimal{Scale: uint8(k.Decimal.GetScale()), Value: k.Decimal.GetValue()}
	case *proto.Value_LongString:
		return string(k.LongString)
	case *proto.Value_ShortString:
		// RabbitMQ's dialect has no short-string field type: send it long.
		return k.ShortString
	case *proto.Value_ByteArray:
		return k.ByteArray
	case *proto.Value_Timestamp:
		return time.Unix(k.Timestamp, 0).UTC()
	case *proto.Value_Table:
		t := tableFromProto(k.Table)
		if t == nil {
			t = wire.Table{}
		}
		return t
	case *proto.Value_Array:
		a := make([]any, 0, len(k.Array.GetValues()))
		for _, e := range k.Array.GetValues() {
			a = append(a, valueFromProto(e))
		}
		return a
	}
	return nil
}

// propertiesToProto converts content-header properties; only present ones
// are set.
func propertiesToProto(p *wire.Properties) (*proto.Properties, error) {
	out := &proto.Properties{}
	if p == nil {
		return out, nil
	}
	str := func(flag uint16, v string) *string {
		if p.Flags&flag == 0 {
			return nil
		}
		// A copy declared here, not v's address: v would be moved to the
		// heap on every call, a property present or not (ten a publish).
		x := v
		return &x
	}
	u32 := func(flag uint16, v uint8) *uint32 {
		if p.Flags&flag == 0 {
			return nil
		}
		x := uint32(v)
		return &x
	}
	out.ContentType = str(wire.FlagContentType, p.ContentType)
	out.ContentEncoding = str(wire.FlagContentEncoding, p.ContentEncoding)
	if p.Flags&wire.FlagHeaders != 0 {
		h, err := tableToProto(p.Headers)
		if err != nil {
			return nil, err
		}
		if h == nil {
			h = &proto.Table{}
		}
		out.Headers = h
	}
	out.DeliveryMode = u32(wire.FlagDeliveryMode, p.DeliveryMode)
	out.Priority = u32(wire.FlagPriority, p.Priority)
	out.CorrelationId = str(wire.FlagCorrelationID, p.CorrelationID)
	out.ReplyTo = str(wire.FlagReplyTo, p.ReplyTo)
	out.Expiration = str(wire.FlagExpiration, p.Expiration)
	out.MessageId = str(wire.FlagMessageID, p.MessageID)
	if p.Flags&wire.FlagTimestamp != 0 {
		ts := p.Timestamp.Unix()
		out.Timestamp = &ts
	}
	out.Type = str(wire.FlagType, p.Type)
	out.UserId = str(wire.FlagUserID, p.UserID)
	out.AppId = str(wire.FlagAppID, p.AppID)
	out.ClusterId = str(wire.FlagClusterID, p.ClusterID)
	return out, nil
}

// propertiesFromProto converts back to wire properties.
func propertiesFromProto(p *proto.Properties) wire.Properties {
	var out wire.Properties
	if p == nil {
		return out
	}
	str := func(flag uint16, v *string, dst *string) {
		if v != nil {
			out.Flags |= flag
			*dst = *v
		}
	}
	oct := func(flag uint16, v *uint32, dst *uint8) {
		if v != nil {
			out.Flags |= flag
			*dst = uint8(*v)
		}
	}
	str(wire.FlagContentType, p.ContentType, &out.ContentType)
	str(wire.FlagContentEncoding, p.ContentEncoding, &out.ContentEncoding)
	if p.Headers != nil {
		out.Flags |= wire.FlagHeaders
		out.Headers = tableFromProto(p.Headers)
	}
	oct(wire.FlagDeliveryMode, p.DeliveryMode, &out.DeliveryMode)
	oct(wire.FlagPriority, p.Priority, &out.Priority)
	str(wire.FlagCorrelationID, p.CorrelationId, &out.CorrelationID)
	str(wire.FlagReplyTo, p.ReplyTo, &out.ReplyTo)
	str(wire.FlagExpiration, p.Expiration, &out.Expiration)
	str(wire.FlagMessageID, p.MessageId, &out.MessageID)
	if p.Timestamp != nil {
		out.Flags |= wire.FlagTimestamp
		out.Timestamp = time.Unix(*p.Timestamp, 0).UTC()
	}
	str(wire.FlagType, p.Type, &out.Type)
	str(wire.FlagUserID, p.UserId, &out.UserID)
	str(wire.FlagAppID, p.AppId, &out.AppID)
	str(wire.FlagClusterID, p.ClusterId, &out.ClusterID)
	return out
}
