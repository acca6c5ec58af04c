// Ollama's side of the Modelfile checks, in Go as Ollama runs it:
//
//	go run ollama_render.go render < CASES.json
//	    renders each case's TEMPLATE with Go's text/template over the values
//	    Ollama's template package passes for a chat (template.go: messages
//	    collated, consecutive ones of one role joined by a blank line, the
//	    system messages' text as .System, missingkey=zero, its functions),
//	    and prints {"results": [{"text": ..., "error": ...}]}.
//	go run ollama_render.go modelfile FILE
//	    reads FILE by the rules of Ollama's parser (parser/parser.go: commands
//	    named case-insensitively, values bare, "..." or """...""" across
//	    lines, # comments, characters strconv.IsPrint rejects dropped) and
//	    prints {"commands": [{"name": ..., "args": ...}]} or {"error": ...}.
//
// Written for Tailor's tests from the behaviour those files describe; it
// links nothing of Ollama's.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/template"
	"time"
)

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// The fields Ollama's templates read of a message.
type templateMessage struct {
	Role       string
	Content    string
	Thinking   string
	Images     []string
	ToolCalls  []any
	ToolName   string
	ToolCallID string
}

type renderCase struct {
	Template string    `json:"template"`
	Messages []message `json:"messages"`
}

type result struct {
	Text  string `json:"text"`
	Error string `json:"error,omitempty"`
}

var funcs = template.FuncMap{
	"json": func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	},
	"currentDate":      func(args ...string) string { return time.Now().Format("2006-01-02") },
	"yesterdayDate":    func(args ...string) string { return time.Now().AddDate(0, 0, -1).Format("2006-01-02") },
	"toTypeScriptType": func(v any) string { return "any" },
}

func render(c renderCase) result {
	t, err := template.New("").Option("missingkey=zero").Funcs(funcs).Parse(c.Template)
	if err != nil {
		return result{Error: err.Error()}
	}
	var system []string
	var collated []*templateMessage
	for _, m := range c.Messages {
		if m.Role == "system" {
			system = append(system, m.Content)
		}
		if n := len(collated); n > 0 && collated[n-1].Role == m.Role && m.Role != "tool" {
			collated[n-1].Content += "\n\n" + m.Content
		} else {
			collated = append(collated, &templateMessage{Role: m.Role, Content: m.Content})
		}
	}
	values := map[string]any{
		"System":     strings.Join(system, "\n\n"),
		"Messages":   collated,
		"Tools":      nil,
		"Response":   "",
		"Think":      false,
		"ThinkLevel": "",
		"IsThinkSet": false,
	}
	// A template without .Messages is Ollama's older kind: one turn's
	// .System, .Prompt and .Response (here the last user message's turn).
	if !strings.Contains(c.Template, ".Messages") {
		delete(values, "Messages")
		for _, m := range collated {
			if m.Role == "user" {
				values["Prompt"] = m.Content
			}
		}
	}
	var b strings.Builder
	if err := t.Execute(&b, values); err != nil {
		return result{Error: err.Error()}
	}
	return result{Text: b.String()}
}

type command struct {
	Name string `json:"name"`
	Args string `json:"args"`
}

var commands = map[string]bool{"from": true, "license": true, "template": true, "system": true, "adapter": true,
	"draft": true, "renderer": true, "parser": true, "parameter": true, "message": true, "requires": true}

// A value as the parser takes it: """...""" or "..." unwrapped; false while
// a quote is still open.
func unquote(s string) (string, bool) {
	if strings.HasPrefix(s, `"""`) {
		if len(s) >= 6 && strings.HasSuffix(s, `"""`) {
			return s[3 : len(s)-3], true
		}
		return "", false
	}
	if strings.HasPrefix(s, `"`) {
		if len(s) >= 2 && strings.HasSuffix(s, `"`) {
			return s[1 : len(s)-1], true
		}
		return "", false
	}
	return s, true
}

func isSpace(r rune) bool   { return r == ' ' || r == '\t' }
func isNewline(r rune) bool { return r == '\r' || r == '\n' }
func isAlpha(r rune) bool   { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }

// parseModelfile walks the text rune by rune: a command's name, then its
// value, which ends at a space or line break once its quotes are closed.
func parseModelfile(text string) ([]command, error) {
	var out []command
	runes := []rune(text)
	line := 1
	for i := 0; i < len(runes); {
		r := runes[i]
		switch {
		case isNewline(r):
			line++
			i++
			continue
		case isSpace(r):
			i++
			continue
		case r == '#':
			for i < len(runes) && !isNewline(runes[i]) {
				i++
			}
			continue
		}
		start := i
		for i < len(runes) && isAlpha(runes[i]) {
			i++
		}
		name := strings.ToLower(string(runes[start:i]))
		if i >= len(runes) || !isSpace(runes[i]) || !commands[name] {
			return nil, fmt.Errorf("line %d: not a command: %q", line, string(runes[start:min(i+1, len(runes))]))
		}
		i++
		if name == "from" {
			name = "model"
		} else if name == "parameter" {
			start = i
			for i < len(runes) && (isAlpha(runes[i]) || runes[i] >= '0' && runes[i] <= '9' || runes[i] == '_') {
				i++
			}
			name = string(runes[start:i])
			if i >= len(runes) || !isSpace(runes[i]) {
				return nil, fmt.Errorf("line %d: a parameter's name is not followed by a space", line)
			}
			i++
		}
		var b strings.Builder
		for {
			if i >= len(runes) {
				v, ok := unquote(strings.TrimSpace(b.String()))
				if !ok {
					return nil, fmt.Errorf("line %d: a quote is not closed", line)
				}
				out = append(out, command{name, v})
				break
			}
			r := runes[i]
			i++
			if isSpace(r) || isNewline(r) {
				if isNewline(r) {
					line++
				}
				if v, ok := unquote(strings.TrimSpace(b.String())); ok && !isSpace(r) {
					out = append(out, command{name, v})
					break
				}
				b.WriteRune(r)
				continue
			}
			if strconv.IsPrint(r) {
				b.WriteRune(r)
			}
		}
	}
	for _, c := range out {
		if c.Name == "model" {
			return out, nil
		}
	}
	return nil, fmt.Errorf("no FROM line")
}

func main() {
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	if len(os.Args) == 2 && os.Args[1] == "render" {
		var cases []renderCase
		if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
			fmt.Fprintln(os.Stderr, "reading cases:", err)
			os.Exit(2)
		}
		results := make([]result, len(cases))
		for i, c := range cases {
			results[i] = render(c)
		}
		enc.Encode(map[string]any{"results": results})
		return
	}
	if len(os.Args) == 3 && os.Args[1] == "modelfile" {
		text, err := os.ReadFile(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		cmds, err := parseModelfile(string(text))
		if err != nil {
			enc.Encode(map[string]any{"error": err.Error()})
			return
		}
		enc.Encode(map[string]any{"commands": cmds})
		return
	}
	fmt.Fprintln(os.Stderr, "usage: ollama_render.go render < CASES.json | modelfile FILE")
	os.Exit(2)
}
