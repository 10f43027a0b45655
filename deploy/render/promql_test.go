package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// selector is a metric selector of a PromQL expression: the metric's name and the label
// matchers in the braces after it, as written (`job="x"`).
type selector struct {
	name     string
	matchers []string
}

// promqlWords are PromQL's keywords, its aggregation operators and the names of its
// literals: never a metric.
var promqlWords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
	"group_left", "group_right", "inf", "nan", "start", "end", "sum", "min", "max", "avg", "group", "stddev",
	"stdvar", "count", "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}

// labelLists are the keywords whose parenthesized list names labels, not metrics.
var labelLists = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}

// promSelectors returns the metric selectors of a PromQL expression, read as PromQL's
// lexer reads it: names inside strings, label matchers, label lists (by, on, ...),
// ranges and subqueries ([5m], [1h:5m]), numbers and durations are not metrics; an
// identifier followed by "(" is a function or an aggregation; any other identifier is a
// metric, and the braces that follow it are its matchers. A selector without a metric
// name ({__name__=...}, {job="x"}) is an error: the name is what the test checks.
func promSelectors(expr string) ([]selector, error) {
	var out []selector
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(expr, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '[':
			end := strings.IndexByte(expr[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("%q: unclosed [", expr)
			}
			i += end + 1
		case c == '{':
			return nil, fmt.Errorf("%q: a selector without a metric name at %d", expr, i)
		case c == '$':
			i = identEnd(expr, i+1)
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isIdent(expr[i]) || expr[i] == '.') {
				i++
			}
		case isIdentStart(c):
			end := identEnd(expr, i)
			word, next := expr[i:end], skipSpace(expr, end)
			switch {
			case slices.Contains(labelLists, word) && next < len(expr) && expr[next] == '(':
				close := strings.IndexByte(expr[next:], ')')
				if close < 0 {
					return nil, fmt.Errorf("%q: unclosed label list after %s", expr, word)
				}
				i = next + close + 1
				continue
			case slices.Contains(promqlWords, strings.ToLower(word)), next < len(expr) && expr[next] == '(':
				i = end
				continue
			}
			sel := selector{name: word}
			i = end
			if next < len(expr) && expr[next] == '{' {
				matchers, end, err := readMatchers(expr, next)
				if err != nil {
					return nil, err
				}
				sel.matchers, i = matchers, end
			}
			out = append(out, sel)
		default:
			i++
		}
	}
	return out, nil
}

// readMatchers reads the label matchers of the braces that open at expr[open], and
// returns them and where the braces close.
func readMatchers(expr string, open int) ([]string, int, error) {
	var matchers []string
	start := open + 1
	for i := open + 1; i < len(expr); {
		switch expr[i] {
		case '"', '\'', '`':
			end, err := skipString(expr, i)
			if err != nil {
				return nil, 0, err
			}
			i = end
		case ',', '}':
			if m := strings.TrimSpace(expr[start:i]); m != "" {
				matchers = append(matchers, strings.Join(strings.Fields(m), ""))
			}
			if expr[i] == '}' {
				return matchers, i + 1, nil
			}
			i++
			start = i
		default:
			i++
		}
	}
	return nil, 0, fmt.Errorf("%q: unclosed {", expr)
}

// skipString returns where the string literal that opens at expr[i] ends.
func skipString(expr string, i int) (int, error) {
	quote := expr[i]
	for j := i + 1; j < len(expr); j++ {
		switch {
		case expr[j] == '\\' && quote != '`':
			j++
		case expr[j] == quote:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("%q: unclosed string at %d", expr, i)
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
func isIdent(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

func identEnd(expr string, i int) int {
	for i < len(expr) && isIdent(expr[i]) {
		i++
	}
	return i
}

func skipSpace(expr string, i int) int {
	for i < len(expr) && strings.ContainsRune(" \t\n\r", rune(expr[i])) {
		i++
	}
	return i
}

// TestPromSelectors: the metric names (and their matchers) of the queries a dashboard
// has, and none of the words around them.
func TestPromSelectors(t *testing.T) {
	for name, tc := range map[string]struct {
		expr string
		want []string // name{matchers}
		err  bool
	}{
		"plain":     {expr: "kubefence_leader", want: []string{"kubefence_leader{}"}},
		"matchers":  {expr: `sum(kubefence_leader{namespace=~"$namespace", cluster=~"$cluster"})`, want: []string{`kubefence_leader{namespace=~"$namespace",cluster=~"$cluster"}`}},
		"histogram": {expr: `histogram_quantile(0.99, sum by (le, policy) (rate(kubefence_failure_to_released_seconds_bucket{a="b"}[1h])))`, want: []string{`kubefence_failure_to_released_seconds_bucket{a="b"}`}},
		"binary and keywords": {expr: `max by (node) (a_members) * 2 <= bool max without (pod) (b_alive offset 5m) or on (node) group_left (x) vector(0)`,
			want: []string{"a_members{}", "b_alive{}"}},
		"strings and ranges": {expr: `count(c_total{reason=~"by|sum(x)", q='it\'s'}[$__rate_interval:1m]) unless d`,
			want: []string{`c_total{reason=~"by|sum(x)",q='it\'s'}`, "d{}"}},
		"braces in a string": {expr: `e{msg="{not_a_metric}", b!="}"} > 1e3`, want: []string{`e{msg="{not_a_metric}",b!="}"}`}},
		"time and numbers":   {expr: `time() - max(f_timestamp_seconds) > 1.5e+3`, want: []string{"f_timestamp_seconds{}"}},
		"nameless":           {expr: `{__name__="kubefence_leader"}`, err: true},
		"unclosed":           {expr: `g{a="b"`, err: true},
	} {
		t.Run(name, func(t *testing.T) {
			sels, err := promSelectors(tc.expr)
			if tc.err {
				if err == nil {
					t.Errorf("no error, selectors %v", sels)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range sels {
				got = append(got, s.name+"{"+strings.Join(s.matchers, ",")+"}")
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("selectors %v, want %v", got, tc.want)
			}
		})
	}
}
