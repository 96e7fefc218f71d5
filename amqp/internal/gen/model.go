package main

import (
	"encoding/xml"
	"fmt"
	"os"
	"strings"
)

// spec is the root of the AMQP specification XML.
type spec struct {
	Major     int        `xml:"major,attr"`
	Minor     int        `xml:"minor,attr"`
	Revision  int        `xml:"revision,attr"`
	Constants []constant `xml:"constant"`
	Domains   []domain   `xml:"domain"`
	Classes   []class    `xml:"class"`
}

type constant struct {
	Name  string `xml:"name,attr"`
	Value int    `xml:"value,attr"`
	Class string `xml:"class,attr"`
}

type domain struct {
	Name string `xml:"name,attr"`
	Type string `xml:"type,attr"`
}

type class struct {
	Name    string   `xml:"name,attr"`
	Index   int      `xml:"index,attr"`
	Fields  []field  `xml:"field"`
	Methods []method `xml:"method"`
}

type method struct {
	Name        string  `xml:"name,attr"`
	Index       int     `xml:"index,attr"`
	Synchronous int     `xml:"synchronous,attr"`
	Content     int     `xml:"content,attr"`
	Deprecated  int     `xml:"deprecated,attr"`
	Fields      []field `xml:"field"`
}

type field struct {
	Name     string `xml:"name,attr"`
	Domain   string `xml:"domain,attr"`
	Type     string `xml:"type,attr"`
	Reserved int    `xml:"reserved,attr"`
}

// model is what the templates render.
type model struct {
	Spec      string
	Constants []constModel
	Classes   []classModel
	Methods   []methodModel
	Props     []fieldModel
}

type constModel struct {
	GoName string
	Value  int
	Kind   string // "", "soft-error" or "hard-error"
	Doc    string
}

type classModel struct {
	GoName string
	Name   string
	Index  int
}

type methodModel struct {
	GoName     string
	Name       string // class.method
	Class      classModel
	Index      int
	Sync       bool
	Content    bool
	Deprecated bool
	Fields     []fieldModel
}

type fieldModel struct {
	GoName   string
	Name     string
	Type     string // AMQP base type
	GoType   string
	Reserved bool
	// BitIndex is the position of a bit within its packed octet; FirstBit
	// and LastBit mark the run boundaries.
	BitIndex int
	FirstBit bool
	LastBit  bool
	// Flag is the property flag (content headers only).
	Flag uint16
}

var goTypes = map[string]string{
	"bit":       "bool",
	"octet":     "uint8",
	"short":     "uint16",
	"long":      "uint32",
	"longlong":  "uint64",
	"shortstr":  "string",
	"longstr":   "string",
	"timestamp": "time.Time",
	"table":     "Table",
}

// goName turns "consume-ok" into "ConsumeOk".
func goName(s string) string {
	var b strings.Builder
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == '-' || r == '_' || r == ' ' }) {
		if part == "id" {
			b.WriteString("ID")
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]))
		b.WriteString(part[1:])
	}
	return b.String()
}

func load(path string) (*spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s spec
	if err := xml.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return &s, nil
}

func build(s *spec, specName string) (*model, error) {
	domains := map[string]string{}
	for _, d := range s.Domains {
		domains[d.Name] = d.Type
	}
	resolve := func(f field) (string, error) {
		t := f.Type
		if t == "" {
			var ok bool
			t, ok = domains[f.Domain]
			if !ok {
				return "", fmt.Errorf("field %s: unknown domain %q", f.Name, f.Domain)
			}
		}
		// Domains may refer to other domains.
		for i := 0; i < 8; i++ {
			if _, base := goTypes[t]; base {
				return t, nil
			}
			next, ok := domains[t]
			if !ok {
				break
			}
			t = next
		}
		if _, ok := goTypes[t]; !ok {
			return "", fmt.Errorf("field %s: unknown type %q", f.Name, t)
		}
		return t, nil
	}
	fields := func(fs []field) ([]fieldModel, error) {
		out := make([]fieldModel, 0, len(fs))
		for _, f := range fs {
			t, err := resolve(f)
			if err != nil {
				return nil, err
			}
			out = append(out, fieldModel{
				GoName:   goName(f.Name),
				Name:     f.Name,
				Type:     t,
				GoType:   goTypes[t],
				Reserved: f.Reserved == 1,
			})
		}
		// Mark runs of consecutive bits: they share one octet (up to 8).
		for i := range out {
			if out[i].Type != "bit" {
				continue
			}
			if i == 0 || out[i-1].Type != "bit" || out[i-1].BitIndex == 7 {
				out[i].FirstBit = true
				out[i].BitIndex = 0
			} else {
				out[i].BitIndex = out[i-1].BitIndex + 1
			}
			if i == len(out)-1 || out[i+1].Type != "bit" || out[i].BitIndex == 7 {
				out[i].LastBit = true
			}
		}
		return out, nil
	}

	m := &model{Spec: specName}
	for _, c := range s.Constants {
		m.Constants = append(m.Constants, constModel{GoName: goName(c.Name), Value: c.Value, Kind: c.Class, Doc: c.Name})
	}
	for _, c := range s.Classes {
		cm := classModel{GoName: goName(c.Name), Name: c.Name, Index: c.Index}
		m.Classes = append(m.Classes, cm)
		if c.Name == "basic" {
			props, err := fields(c.Fields)
			if err != nil {
				return nil, err
			}
			if len(props) > 15 {
				return nil, fmt.Errorf("basic has %d properties: more than one flag word", len(props))
			}
			for i := range props {
				props[i].Flag = 1 << (15 - i)
				if props[i].Name == "reserved" {
					// RabbitMQ and its clients call this property cluster-id.
					props[i].GoName = "ClusterID"
				}
			}
			m.Props = props
		}
		for _, me := range c.Methods {
			fs, err := fields(me.Fields)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", c.Name, me.Name, err)
			}
			for i := range fs {
				// The close methods name the method that failed; ClassID and
				// MethodID are the Method interface's own.
				switch fs[i].Name {
				case "class-id":
					fs[i].GoName = "FailingClassID"
				case "method-id":
					fs[i].GoName = "FailingMethodID"
				}
			}
			m.Methods = append(m.Methods, methodModel{
				GoName:     cm.GoName + goName(me.Name),
				Name:       c.Name + "." + me.Name,
				Class:      cm,
				Index:      me.Index,
				Sync:       me.Synchronous == 1,
				Content:    me.Content == 1,
				Deprecated: me.Deprecated == 1,
				Fields:     fs,
			})
		}
	}
	return m, nil
}
