// godiff answers questions about Go semantics that tiphys reimplements, so that a Rust test can
// put the same cases to both and compare (tests/godiff). It reads one JSON case per line on stdin
// and writes one JSON answer per line on stdout, in order. Every answer has "ok" (false when Go
// refused the input, with its message in "error"); the other fields depend on the operation:
//
//	{"op":"glob","pattern":"a*","input":"ab","separators":"/"}  -> {"ok":true,"match":true,"grammar":true}
//	    github.com/gobwas/glob, as Argo CD's util/glob.Match compiles and matches; "grammar" is
//	    what the tree gobwas's own parser builds means by the grammar gobwas documents (our
//	    translation of that tree to a regexp), so that a test can tell a bug of gobwas's
//	    matchers (where the two disagree) from a difference of its own
//	{"op":"duration","input":"1h30m"}                           -> {"ok":true,"nanos":5400000000000}
//	    time.ParseDuration
//	{"op":"days","input":"7d"}                                  -> {"ok":true,"nanos":...}
//	    github.com/argoproj/pkg/v2/time.ParseDuration (users.session.duration, CLI expiries)
//	{"op":"selector","selector":"a in (b)","labels":{"a":"b"}}  -> {"ok":true,"match":true}
//	    k8s.io/apimachinery/pkg/labels.Parse, then Matches
//	{"op":"regex","pattern":"^a+","input":"aa"}                 -> {"ok":true,"match":true}
//	    regexp.MatchString (Casbin's regexMatch, policy.matchMode: regex)
//	{"op":"csv","input":"p, a, \"b,c\""}                         -> {"ok":true,"fields":["p","a","b,c"]}
//	    encoding/csv with TrimLeadingSpace, one Read (Argo CD's policy line reader)
//	{"op":"expr","input":"app.x == 1","env":{"app":{"x":1}}}   -> {"ok":true,"value":[true]}
//	    github.com/expr-lang/expr Eval, as Argo CD's deep links evaluate a link's "if" (the
//	    env's numbers as Kubernetes' unstructured objects hold them: int64 when whole, else
//	    float64); the value is wrapped in a one-item list so that nil can be told from absent
//
// A case Go panics on answers {"ok":false,"panic":true,"error":...}, and the program goes on.
package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	pkgtime "github.com/argoproj/pkg/v2/time"
	"github.com/expr-lang/expr"
	"github.com/gobwas/glob"
	"github.com/gobwas/glob/syntax"
	"github.com/gobwas/glob/syntax/ast"
	"k8s.io/apimachinery/pkg/labels"
)

type request struct {
	Op         string            `json:"op"`
	Pattern    string            `json:"pattern"`
	Input      string            `json:"input"`
	Separators string            `json:"separators"`
	Selector   string            `json:"selector"`
	Labels     map[string]string `json:"labels"`
	Env        json.RawMessage   `json:"env"`
}

type answer struct {
	OK     bool     `json:"ok"`
	Error  string   `json:"error,omitempty"`
	Panic  bool     `json:"panic,omitempty"`
	Match  *bool    `json:"match,omitempty"`
	Nanos  *int64   `json:"nanos,omitempty"`
	Fields []string `json:"fields,omitempty"`
	// Grammar is the glob's meaning by its parse tree (see globGrammar).
	Grammar *bool `json:"grammar,omitempty"`
	Value   []any `json:"value,omitempty"`
}

func refused(err error) answer { return answer{Error: err.Error()} }

func matched(m bool) answer { return answer{OK: true, Match: &m} }

func nanos(d time.Duration) answer { n := int64(d); return answer{OK: true, Nanos: &n} }

func run(req request) (out answer) {
	defer func() {
		if p := recover(); p != nil {
			out = answer{Panic: true, Error: fmt.Sprint(p), Grammar: out.Grammar}
		}
	}()
	switch req.Op {
	case "glob":
		tree, err := syntax.Parse(req.Pattern)
		if err != nil {
			return refused(err)
		}
		grammar := globGrammar(tree, req.Separators).MatchString(req.Input)
		defer func() { out.Grammar = &grammar }()
		g, err := glob.Compile(req.Pattern, []rune(req.Separators)...)
		if err != nil {
			return refused(err)
		}
		return matched(g.Match(req.Input))
	case "duration":
		d, err := time.ParseDuration(req.Input)
		if err != nil {
			return refused(err)
		}
		return nanos(d)
	case "days":
		d, err := pkgtime.ParseDuration(req.Input)
		if err != nil {
			return refused(err)
		}
		return nanos(*d)
	case "selector":
		s, err := labels.Parse(req.Selector)
		if err != nil {
			return refused(err)
		}
		return matched(s.Matches(labels.Set(req.Labels)))
	case "regex":
		m, err := regexp.MatchString(req.Pattern, req.Input)
		if err != nil {
			return refused(err)
		}
		return matched(m)
	case "csv":
		r := csv.NewReader(strings.NewReader(req.Input))
		r.TrimLeadingSpace = true
		fields, err := r.Read()
		if err != nil {
			return refused(err)
		}
		return answer{OK: true, Fields: append([]string{}, fields...)}
	case "expr":
		env, err := unstructuredEnv(req.Env)
		if err != nil {
			return refused(err)
		}
		v, err := expr.Eval(req.Input, env)
		if err != nil {
			return refused(err)
		}
		return answer{OK: true, Value: []any{v}}
	}
	return answer{Error: "unknown op " + req.Op}
}

// unstructuredEnv decodes a JSON object with the number types of an unstructured object.
func unstructuredEnv(raw json.RawMessage) (map[string]any, error) {
	env := map[string]any{}
	if len(raw) == 0 {
		return env, nil
	}
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.UseNumber()
	if err := d.Decode(&env); err != nil {
		return nil, err
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case json.Number:
			if i, err := x.Int64(); err == nil {
				return i
			}
			f, _ := x.Float64()
			return f
		case map[string]any:
			for k, e := range x {
				x[k] = walk(e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		}
		return v
	}
	walk(env)
	return env, nil
}

// globGrammar is the anchored regexp that the glob tree means by gobwas's documented grammar:
// `*` any run of non-separators, `**` any run, `?` one non-separator, a list or range one
// character, alternatives any of their patterns, an empty pattern the empty string.
func globGrammar(tree *ast.Node, separators string) *regexp.Regexp {
	// Every member of a class as \x{…}: no character means anything else there.
	members := func(s string) string {
		var m strings.Builder
		for _, r := range s {
			fmt.Fprintf(&m, `\x{%x}`, r)
		}
		return m.String()
	}
	single := "."
	if separators != "" {
		single = "[^" + members(separators) + "]"
	}
	var b strings.Builder
	var walk func(n *ast.Node)
	class := func(not bool, body string) {
		if not {
			b.WriteString("[^" + body + "]")
		} else {
			b.WriteString("[" + body + "]")
		}
	}
	walk = func(n *ast.Node) {
		switch n.Kind {
		case ast.KindPattern:
			b.WriteString("(?:")
			for _, c := range n.Children {
				walk(c)
			}
			b.WriteString(")")
		case ast.KindAnyOf:
			b.WriteString("(?:")
			for i, c := range n.Children {
				if i > 0 {
					b.WriteString("|")
				}
				walk(c)
			}
			b.WriteString(")")
		case ast.KindText:
			b.WriteString(regexp.QuoteMeta(n.Value.(ast.Text).Text))
		case ast.KindAny:
			b.WriteString(single + "*")
		case ast.KindSuper:
			b.WriteString(".*")
		case ast.KindSingle:
			b.WriteString(single)
		case ast.KindList:
			l := n.Value.(ast.List)
			class(l.Not, members(l.Chars))
		case ast.KindRange:
			r := n.Value.(ast.Range)
			class(r.Not, members(string(r.Lo))+"-"+members(string(r.Hi)))
		case ast.KindNothing:
		}
	}
	walk(tree)
	return regexp.MustCompile(`(?s)\A` + b.String() + `\z`)
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fmt.Fprintf(os.Stderr, "godiff: bad case %q: %v\n", in.Text(), err)
			os.Exit(2)
		}
		if err := enc.Encode(run(req)); err != nil {
			fmt.Fprintf(os.Stderr, "godiff: %v\n", err)
			os.Exit(2)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "godiff: %v\n", err)
		os.Exit(2)
	}
}
