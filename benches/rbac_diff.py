#!/usr/bin/env python3
"""Differential test of tiphys's RBAC engine against the Go oracle (casbin + gobwas/glob).

Generates random Argo CD policies (policy.csv format) and requests from one
seeded vocabulary, evaluates them with both tools in glob and in regex match
mode, and, for every disagreement, shrinks the case (policy lines first, then
the characters of the remaining fields and of the request) and prints the
minimal policy, the request and both answers. Load disagreements (one tool
refuses a policy the other loads) are reported the same way; policies that both
tools refuse are skipped.

Build the tools first:

    cargo build --release --example rbac_eval
    SKIP_APT=1 ../shared/peers/peer-go/build.sh        # only if ~/.cache/peer-go/peer-go is missing

Usage:

    benches/rbac_diff.py [--seed N] [--rounds N] [--requests N] [--jobs N]
                         [--time-limit SECONDS] [--out DIR] [--flavors glob:2,regex:3,mixed:1]
                         [--ascii-only]
                         [--ours PATH] [--oracle PATH] [--modes glob,regex] [-v]

    --seed N          base seed (default 1); round i uses its own generator seeded
                      with (seed, i), so a round can be re-run alone with --only i
    --rounds N        number of random policies (default 500); each is run in every mode
    --requests N      requests per policy (default 80)
    --jobs N          rounds run in parallel (default: number of CPUs)
    --time-limit S    stop starting new rounds after S seconds (default: none)
    --out DIR         also write each distinct repro to DIR/NNNN-<class>/
                      (policy.csv, requests.txt, cmd.sh to re-run both tools, finding.json)
    --shrink-budget N tool-pair runs allowed for shrinking one mismatch (default 400)
    --shrink-per-round N  mismatching requests shrunk per policy and mode (default 2)
    --fine-per-class N    character-level shrinking only for the first N findings of a
                      kind (default 10); later ones are only reduced to the lines/requests
                      that matter
    --flavors W       weights of the policy flavours (glob patterns, regex patterns, both)
    --ascii-only      replace every non-ASCII character by an ASCII letter, to find what the
                      (very frequent) non-ASCII glob mismatches hide
    --only I          run only round I (with the same --seed) and show its details
    --ours PATH       default: <repo>/target/x86_64-unknown-linux-gnu/release/examples/rbac_eval
                      (falls back to <repo>/target/release/examples/rbac_eval); point it at a
                      copy when someone may rebuild the example during a long run
    --oracle PATH     default: ~/.cache/peer-go/peer-go

Both tools read `sub,res,act,obj` CSV lines on stdin and print allow/deny per
line; every request field is sent quoted, so the drivers' line trimming does
not change the request.

Mismatch kinds (the `class` printed with each repro; the text after the kind
names the pattern and value that disagree) are labels from probes run with both
tools on the minimal case:

    load:ours-refuses / load:oracle-refuses   one tool does not load the policy
    oracle:cache-key-collision  needs an earlier request and goes away with the oracle's
                                plain enforcer (CachedEnforcer keys requests by fields
                                joined with `$$`)
    order-dependent             needs an earlier request otherwise
    casbin:no-p-lines           no `p` line: casbin evaluates the matcher once with empty
                                p values, so subject "" (or one bound to "") is allowed
    casbin:dedup-comma-key      casbin skips a line whose fields joined with `,` equal an
                                earlier line's (quoted fields with commas)
    regex:validity ours-accepts/go-rejects P, ours-rejects/go-accepts P
                                the tools disagree on whether P compiles (an invalid regex
                                reached denies the whole check)
    regex:semantics P ~ V       both compile P, they disagree on matching V
    glob:U+FFFD in pattern      gobwas's lexer refuses U+FFFD, so the pattern never matches
    glob:gobwas panics in Match (check fails)  the oracle's check fails even with a line
                                allowing everything: gobwas panicked (casbin recovers; deny)
    glob:non-ASCII (gobwas byte/rune offsets)  agrees once non-ASCII letters are replaced
    glob:single-character matcher matches the empty value  (`?`, `[!a]` on "")
    glob:braces with an empty or unclosed alternative, glob:braces, glob:other
    effect:nonstandard          no single pattern explains it and a `p` line has an effect
                                other than exactly allow/deny (upstream casbin 2.135 grants
                                nothing for those lines; the peer runs 2.60)
    <mode>:combination          no single pattern/value pair disagrees

Exit status: 0 when the tools agreed everywhere, 1 when any mismatch (answer or
load) was found, 2 on a usage or setup error.
"""

import argparse
import concurrent.futures
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAVOR_WEIGHTS = {"glob": 2, "regex": 3, "mixed": 1}
ASCII_ONLY = False
MODES = ("glob", "regex")
TOOL_TIMEOUT = 60.0

# ---------------------------------------------------------------- vocabulary

WORDS = [
    "applications", "applicationsets", "clusters", "repositories", "projects", "logs", "exec",
    "get", "create", "update", "delete", "sync", "override", "action", "invoke",
    "default", "proj", "app", "guestbook", "ns", "a", "b", "c", "ab", "abc", "x", "xy",
    "my-proj", "dev", "prod", "kube-system", "https://kubernetes.default.svc", "v1",
    "Deployment", "apps", "restart", "é", "ünï", "日本", "ſ", "K", "ß", "Ω", "\ufffd",
    "a.b", "a_b", "a-b", "1", "42", "0", " ", "  ", "\t", "\u00a0", "$$", "$", "x$$y",
    "\U0001e030", "\u1c89", "\u1c8a", "\u1e9e", "\u212a", "\u0130",
]
PATH_CHARS = "abcxyz019-_./é日 "
SPECIAL_VALUES = [
    "", " ", "*", "**", "?", "[", "]", "{", "}", ",", "\\", "[abc]", "{a,b}", "a,b", "a}", "\\*",
    "^", "$", ".", ".*", "(", ")", "|", "+", "a{2}", "aa", "a{,5}", "[[:alpha:]]", "\ufffd",
    "é/ü", "日本/語", "a b", "a ", " a", "\u00a0a", "a\u00a0", "\u2003", "x\ty", "\"", "a\"b",
    "$$", "a$$b", "#", "# x", "allow", "deny", "_", "123", "٣", "Ⅻ", "ǅ", "İ", "ı", "K", "ſ", "ß",
    "ẞ", "/", "//", "a/", "/a", "a/b/c/d", "default/ns/app", "proj/app", "xproj/app-2",
]
SUBJECTS = [
    "alice", "bob", "carol", "admin", "role:admin", "role:readonly", "role:dev", "role:ops",
    "proj:p1:dev", "group-a", "devs", "", "*", "a,b", "b,c", "a", "Alice", "alice ", " alice",
    "ünï", "$$", "x$$y", "role:é", "role: spaced", "#hash", "a\"q", "\ufffd", "\u00a0bob",
]
NONSTANDARD_EFFECTS = [
    "Allow", "DENY", "allow ", " allow", "allow # note", "", "deny\t", "permit", "allow,x", "denied",
    "\u00a0allow", "allow\u00a0", "allowed", "deny ",
]

GLOB_CLASSES = [
    "[abc]", "[!abc]", "[a-z]", "[!a-z]", "[]", "[!]", "[a-z0-9]", "[z-a]", "[a-]", "[a-]]", "[-a]",
    "[!-a]", "[\\]]", "[\\]", "[é-ü]", "[!é]", "[\\\\]", "[a", "[!", "[", "[!!]", "[a!]", "[\\a-z]",
    "[a\\-z]", "[*]", "[?]", "[{]", "[,]", "[}]", "[日]", "[ ]", "[/]", "[.-/]", "[a-a]", "[ab-]",
    "[\ufffd]", "[a-\\]]",
]
GLOB_BRACES = [
    "{a,b}", "{a,{b,c}}", "{,a}", "{a,}", "{a,", "{", "{{a,b},c}", "{a*,b?}", "{[ab],c}", "{a,b}{c,d}",
    "{}", "{,}", "{a}", "{ab,a}", "{a,ab}", "{*,a}", "{a,*}", "{\\,,x}", "{a\\}b,c}", "{x{y,z",
    "{a,b,c}", "{app,app-*}", "{*/*,*}", "{é,ü}", "{a,a}", "{ab,abc}{,c}",
]
GLOB_OTHERS = ["*", "**", "***", "?", "??", "\\", "\\*", "\\?", "\\[", "\\{", "\\\\", ",", "}", "]", "a,b", "a}"]
REALISTIC_GLOBS = [
    "*", "*/*", "*/*/*", "default/*", "proj/*", "proj/app", "applications", "get", "*/app*", "my-proj/*",
    "update/*", "delete/*/*/*/*", "action/*", "", " ", "*-*", "a*b*c", "*a*", "?*", "*?", "a?*b",
]

# Regex tokens Go accepts (most of the time) ...
REGEX_SAFE = [
    ".", ".*", ".+", "\\d", "\\w", "\\s", "\\D", "\\W", "\\S", "\\b", "\\B", "{2,3}", "{2}", "{,5}",
    "{2,}", "{1000}", "{0}", "*", "+", "?", "*?", "+?", "??", "(?i)", "(?s)", "(?U)", "(?m)", "(?i-s)",
    "(?i:a|B)", "(?:ab)?", "(?P<n>a)", "[[:alpha:]]", "[[:word:]]", "[[:^digit:]]", "[^a]", "[a-z]",
    "[]a]", "[^]a]", "[a&&b]", "[a-c&&b]", "[a--b]", "[a~~b]", "[[a]", "[a-]", "[\\d-z]", "\\pL",
    "\\p{Greek}", "\\p{L}", "\\PL", "\\p{^Greek}", "\\pZ", "\\p{Any}", "\\Q.*\\E", "\\Qa", "\\12",
    "\\0", "\\x41", "\\x{41}", "\\z", "\\A", "\\b{start}", "|", "\\\\", "\\a", "\\f", "\\v", "\\t",
    "\\-", "\\_", "\\/", "\\ ", "\\.", "\\*", "\\{", "\\}", "}", "{", "(a)*", "(|a)", "a|", "^*",
    "$*", "\\b*", "a(?i)*", "()", "(a|b)", "[^\\x00-\\x{10FFFF}]", "(?i)k", "(?i)ſ", "(?i)ß", "(?i)Ω",
    "(?i)ǅ", "(?i)İ", "[[:space:]]", "[\\s]", "[\\w-]", "(?i)[k]", "\\pN", "\\p{Nd}", "[\\p{Greek}]",
    "[^\\pL]", "\\x{FFFD}", "\ufffd", "a{1,1000}", "(?s).", "(?-s).", "\\Qa\\E*", "a*\\Q\\E*",
    "[\\Q]\\E]", "x{2}", "[a-c]{2}", "(?U)a+", "a{,5}", "a{1,}?", "\\v", "[\\v]", "[[:print:]]",
    "[[:blank:]]", "\\pC", "[^\\n]", "(?i)\\pL", "[é-ü]", "\\p{Han}", "[[:upper:]]", "(?i)[[:upper:]]",
    "\\p{Zs}", "\\P{L}", "\\p{Lu}", "\\x{212A}", "\\x{e9}", "\\x{1001}", "\\x{10FFFF}", "(?i)\\x{212A}",
    "\\PL", "[\\P{L}]", "\\p{Latin}", "\\pL+", "(?i)\u1c8a", "[\\x{1c80}-\\x{1c8f}]",
]
# ... and ones it (or the regex crate) refuses or reads differently.
REGEX_RISKY = [
    "{1001}", "**", "*+", "(", ")", "(?x)", "(?-)", "(?)", "(?i-)", "(?P<n>", "(?<n>a)", "(?P=n)",
    "(?=a)", "(?!a)", "[[:foo:]]", "[]", "[z-a]", "\\p{Letter}", "\\p{Greek", "\\1", "\\8", "\\x{110000}",
    "\\u0041", "\\u{41}", "\\Z", "\\<", "\\>", "\\b{end}", "\\", "\\e", "\\C", "\\K", "\\G", "\\X",
    "\\R", "\\h", "\\é", "x{2}{3}", "|*", "(?i)*", "(a{1000}){1000}", "((a{100}){100}){100}",
    "a{2,1}", "a{1001,}", "x*?*", "\\Q\\E*", "*", "a**", "(?smiU)", "(?P<a-b>x)", "(?P<>x)",
    "(?P<n>a)(?P<n>b)", "\\pé", "\\p{}", "[a-\\d]", "[\\w-\\d]", "\\0101", "\\400", "\\o{101}",
    "(?-i)", "(?i)(?-i)", "a{0,1000}{0,1000}", "(?:a{500}){3}", "\\N", "\\E", "[[=a=]]", "[[.a.]]",
]
REALISTIC_REGEXES = [
    ".*", "^.*$", "applications", "^applications$", "get", "^(get|create)$", "proj/.*", "^proj/[^/]+$",
    "^default/.*", "update/.*", "action/.*", "^$", "", ".", "^.", "^[a-z]+/[a-z0-9-]+$", "\\d+", "^\\w+$",
    "\\bapp\\b", "x{2,3}", "a{,5}", "[[:alpha:]]+", "^a|b$", "(?i)^APP$", "^ab?c*$",
]
RISKY_REGEXES = ["*", "*/*", "a**", "(?x)a", "(", "\\"]


def fmt_field(value, rng, quote_prob=0.08):
    """One CSV field as Argo CD's policy reader (encoding/csv, TrimLeadingSpace) expects it."""
    needs = ("," in value or '"' in value or value[:1].isspace() or value != value.strip("\r\n")
             or value.startswith("#"))
    if needs or rng.random() < quote_prob:
        return '"' + value.replace('"', '""') + '"'
    return value


def req_field(value):
    return '"' + value.replace('"', '""') + '"'


def gen_glob(rng):
    if rng.random() < 0.15:
        return rng.choice(REALISTIC_GLOBS)
    parts = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.34:
            parts.append(rng.choice(WORDS) if rng.random() < 0.5 else rng.choice(["a", "b", "c", "/", "-", ".", "ab", "é"]))
        elif r < 0.56:
            parts.append(rng.choice(["*", "*", "**", "?", "?"]))
        elif r < 0.72:
            parts.append(rng.choice(GLOB_CLASSES))
        elif r < 0.90:
            parts.append(rng.choice(GLOB_BRACES))
        else:
            parts.append(rng.choice(GLOB_OTHERS))
    return "".join(parts)


def gen_regex(rng, risky=0.12):
    if rng.random() < 0.15:
        return rng.choice(REALISTIC_REGEXES if rng.random() > risky else RISKY_REGEXES)
    parts = []
    if rng.random() < 0.3:
        parts.append("^")
    for _ in range(rng.randint(1, 5)):
        r = rng.random()
        if r < 0.4:
            parts.append(rng.choice(WORDS) if rng.random() < 0.5 else rng.choice(["a", "b", "c", "/", "-", "ab", "k"]))
        elif r < 1 - risky:
            parts.append(rng.choice(REGEX_SAFE))
        else:
            parts.append(rng.choice(REGEX_RISKY))
    if rng.random() < 0.3:
        parts.append("$")
    return "".join(parts)


def gen_simple(rng, flavor):
    """A pattern for the fields a line is not about."""
    r = rng.random()
    if flavor == "glob":
        return "*" if r < 0.5 else rng.choice(WORDS[:20])
    if flavor == "regex":
        return ".*" if r < 0.35 else ("" if r < 0.5 else rng.choice(WORDS[:20]))
    return rng.choice(WORDS[:20]) if r < 0.7 else ("" if r < 0.85 else "*")


def gen_pattern(rng, flavor):
    r = rng.random()
    if r < 0.06:
        return rng.choice(SPECIAL_VALUES)
    if flavor == "glob" or (flavor == "mixed" and rng.random() < 0.5):
        return gen_glob(rng)
    return gen_regex(rng)


def gen_effect(rng):
    r = rng.random()
    if r < 0.62:
        return "allow"
    if r < 0.85:
        return "deny"
    return rng.choice(NONSTANDARD_EFFECTS)


def maybe_space(rng, value):
    """Trailing blanks are kept by encoding/csv; sometimes add one."""
    if value and rng.random() < 0.05:
        return value + rng.choice([" ", "  ", "\t"])
    return value


class Policy:
    def __init__(self):
        self.lines = []
        self.rules = []      # (sub, res, act, obj) patterns of the p lines
        self.edges = []      # (member, role)
        self.names = []
        self.default_role = None
        self.text = ""


def gen_policy(rng):
    pol = Policy()
    flavor = rng.choices(list(FLAVOR_WEIGHTS), weights=list(FLAVOR_WEIGHTS.values()))[0]
    small = rng.random() < 0.35
    names = rng.sample(SUBJECTS, rng.randint(1, 3) if small else rng.randint(2, 7))
    if not small and rng.random() < 0.3:
        names += [f"role:r{i}" for i in range(rng.randint(1, 13))]
    lines = pol.lines

    def p_line(sub=None):
        sub = rng.choice(names) if sub is None else sub
        focus = rng.randrange(3) if rng.random() < 0.85 else None
        pats = []
        for k in range(3):
            if focus is None or k == focus or rng.random() < 0.15:
                pats.append(maybe_space(rng, gen_pattern(rng, flavor)))
            else:
                pats.append(gen_simple(rng, flavor))
        pol.rules.append((sub, *pats))
        fields = [sub] + pats + [gen_effect(rng)]
        return "p, " + ", ".join(fmt_field(f, rng) for f in fields)

    def g_line(a, b):
        pol.edges.append((a, b))
        return "g, " + fmt_field(a, rng) + ", " + fmt_field(b, rng)

    n_p = 0 if rng.random() < 0.05 else (rng.randint(1, 3) if small else rng.randint(1, 9))
    for _ in range(n_p):
        lines.append(p_line())
    # role chains (possibly longer than casbin's 10-level limit) and cycles
    if rng.random() < (0.2 if small else 0.5):
        depth = rng.randint(1, 12)
        chain = [rng.choice(names)] + [f"role:c{i}" for i in range(1, depth + 1)]
        for a, b in zip(chain, chain[1:]):
            lines.append(g_line(a, b))
        lines.append(p_line(chain[-1]))
        if rng.random() < 0.4:
            lines.append(p_line(chain[rng.randrange(len(chain))]))
        if rng.random() < 0.3:
            lines.append(g_line(chain[-1], chain[rng.randrange(len(chain))]))  # cycle
        names += chain[1:]
    for _ in range(rng.randint(0, 2) if small else rng.randint(0, 5)):
        lines.append(g_line(maybe_space(rng, rng.choice(names + SUBJECTS)), maybe_space(rng, rng.choice(names + SUBJECTS))))
    # casbin keys lines by their fields joined with ',': a colliding pair
    if rng.random() < 0.05:
        x, y, z = rng.choice(["a", "role:x"]), rng.choice(["b", "get"]), rng.choice(["c", "*"])
        if rng.random() < 0.5:
            lines.append(f'p, "{x},{y}", {z}, get, *, allow')
            lines.append(f'p, {x}, "{y},{z}", get, *, allow')
            pol.rules += [(f"{x},{y}", z, "get", "*"), (x, f"{y},{z}", "get", "*")]
            names += [x, f"{x},{y}"]
        else:
            lines.append(f'g, "{x},{y}", {z}')
            lines.append(f'g, {x}, "{y},{z}"')
            lines.append(f"p, {z}, *, *, *, allow")
            lines.append(f'p, "{y},{z}", *, *, *, allow')
            pol.edges += [(f"{x},{y}", z), (x, f"{y},{z}")]
            pol.rules += [(z, "*", "*", "*"), (f"{y},{z}", "*", "*", "*")]
            names += [x, f"{x},{y}"]
    # noise: comments, blank lines, unused casbin sections, odd whitespace, CRLF
    for _ in range(rng.randint(0, 3)):
        if rng.random() < 0.5:
            lines.insert(rng.randint(0, len(lines)), rng.choice([
                "", "   ", "# comment", "  # indented comment", "#p, alice, *, *, *, allow", "r, x",
                "e", "m, 1, 2", "\tp, alice, applications, get, */*, allow", '"p", bob, *, *, *, allow',
                "\u00a0p, alice, a, b, c, allow", "p,alice,x,y,z,allow", "  g , alice, role:dev",
            ]))
    # rarely, a line that should not load
    if rng.random() < 0.05:
        lines.insert(rng.randint(0, len(lines)), rng.choice([
            "p, a, b, c, d", "p, a, b, c, d, allow, extra", "g, a", "g, a, b, c", "x, a, b", "P, a, b, c, d, allow",
            'p, a"b, c, d, e, allow', 'g, "a, b', 'p, "a"b, c, d, e, allow', ", a, b", "p , a, b, c, d, allow",
            "gg, a, b", "rr, x", "p", "g", 'g, a, "b', 'p, a, b, c, d, "allow', "\ufeffp, a, b, c, d, allow",
        ]))
    sep = "\r\n" if rng.random() < 0.1 else "\n"
    pol.text = sep.join(lines) + (sep if rng.random() < 0.8 else "")
    r = rng.random()
    if r < 0.6:
        pol.default_role = None
    elif r < 0.85:
        pol.default_role = rng.choice(names)
    else:
        pol.default_role = rng.choice(["role:unknown", "", "*", " "])
    pol.names = list(dict.fromkeys(names))
    return pol


# ---------------------------------------------------------------- request values

def instantiate_glob(pat, rng):
    """A value that a glob pattern probably matches (best effort)."""
    out = []
    i = 0
    n = len(pat)
    depth = 0
    while i < n:
        c = pat[i]
        if c == "\\":
            if i + 1 < n:
                out.append(pat[i + 1])
            i += 2
        elif c == "*":
            out.append(rng.choice(["", "", "x", "a/b", "/", "é", "*", rng.choice(WORDS)]))
            i += 1
        elif c == "?":
            out.append(rng.choice("axé/-?日"))
            i += 1
        elif c == "[":
            j = pat.find("]", i + 2)
            body = pat[i + 1:j] if j != -1 else ""
            neg = body.startswith("!")
            body = body[1:] if neg else body
            if neg:
                out.append(rng.choice(["q", "Z", "日", "-", "é", "a"]))
            elif len(body) == 3 and body[1] == "-" and body[0] <= body[2]:
                out.append(chr(rng.randint(ord(body[0]), ord(body[2]))))
            elif body.replace("\\", ""):
                out.append(rng.choice(body.replace("\\", "")))
            i = j + 1 if j != -1 else n
        elif c == "{":
            depth += 1
            i += 1
            if rng.random() < 0.5:
                # take a later alternative: skip to the next top-level ','
                level, k = 0, i
                while k < n:
                    if pat[k] == "\\":
                        k += 2
                        continue
                    if pat[k] == "{":
                        level += 1
                    elif pat[k] == "}":
                        if level == 0:
                            break
                        level -= 1
                    elif pat[k] == "," and level == 0:
                        i = k + 1
                        break
                    k += 1
        elif c == "," and depth:
            level = 0
            while i < n:
                if pat[i] == "\\":
                    i += 2
                    continue
                if pat[i] == "{":
                    level += 1
                elif pat[i] == "}":
                    if level == 0:
                        break
                    level -= 1
                i += 1
        elif c == "}" and depth:
            depth -= 1
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


REGEX_LITERALIZE = [
    ("\\d", "7"), ("\\w", "w"), ("\\s", " "), ("\\D", "x"), ("\\W", "-"), ("\\S", "s"), ("\\b", ""),
    ("\\B", ""), ("\\pL", "é"), ("\\pN", "٣"), ("[[:alpha:]]", "k"), ("[[:word:]]", "_"), (".*", "ab"),
    (".+", "z"), (".", "."), ("(?i)", ""), ("\\Q", ""), ("\\E", ""), ("[a-z]", "q"), ("[^a]", "b"),
]


def instantiate_regex(pat, rng):
    s = pat
    for a, b in REGEX_LITERALIZE:
        if rng.random() < 0.8:
            s = s.replace(a, b)
    s = re.sub(r"\{\d*,?\d*\}", "", s) if rng.random() < 0.5 else s
    s = "".join(ch for ch in s if ch not in "^$()|*+?" or rng.random() < 0.1)
    s = s.replace("\\", "") if rng.random() < 0.7 else s
    if rng.random() < 0.3:
        s = rng.choice(["x", "", "pre/", "K", "ſ"]) + s + rng.choice(["", "-2", "/z", "é"])
    return s


def random_path(rng):
    segs = ["".join(rng.choice(PATH_CHARS) for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(1, 4))]
    return "/".join(segs)


def mutate(v, rng):
    r = rng.random()
    if r < 0.25 or not v:
        return v + rng.choice(["x", "/", " ", "é", "-", "?"])
    i = rng.randrange(len(v))
    if r < 0.5:
        return v[:i] + v[i + 1:]
    if r < 0.7:
        return v.swapcase()
    if r < 0.85:
        return v[:i] + rng.choice("aZ/日\ufffd.") + v[i + 1:]
    return rng.choice(["x", "", "é"]) + v


def instantiate(pat, rng):
    r = rng.random()
    if r < 0.45:
        return instantiate_glob(pat, rng)
    if r < 0.9:
        return instantiate_regex(pat, rng)
    return pat  # the pattern text itself


def gen_value(rng, patterns):
    r = rng.random()
    if r < 0.4 and patterns:
        return instantiate(rng.choice(patterns), rng)
    if r < 0.65:
        return rng.choice(WORDS)
    if r < 0.82:
        return random_path(rng)
    return rng.choice(SPECIAL_VALUES)


def clean(v):
    return v.replace("\r", "").replace("\n", "")


def members_reaching(pol, role, rng, steps):
    """A subject that reaches `role` through g edges (walking the edges backwards)."""
    cur = role
    for _ in range(steps):
        preds = [a for a, b in pol.edges if b == cur]
        if not preds:
            break
        cur = rng.choice(preds)
    return cur


def gen_requests(rng, pol, count):
    patterns = [p for rule in pol.rules for p in rule[1:]]
    reqs = []
    while len(reqs) < count:
        r = rng.random()
        if r < 0.6 and pol.rules:
            # aimed at one p line, through its subject or a member of it
            rule = rng.choice(pol.rules)
            sub = rule[0] if rng.random() < 0.5 else members_reaching(pol, rule[0], rng, rng.randint(1, 12))
            if pol.default_role is not None and rng.random() < 0.15:
                sub = rng.choice(["", "nobody"])
            req = [sub] + [instantiate(p, rng) for p in rule[1:]]
            if rng.random() < 0.25:
                k = rng.randrange(4)
                req[k] = mutate(req[k], rng)
        else:
            x = rng.random()
            if x < 0.55:
                sub = rng.choice(pol.names)
            elif x < 0.7:
                sub = rng.choice(["nobody", "Bob", "role:none", "alice2"])
            elif x < 0.85:
                sub = ""
            elif x < 0.9:
                sub = "*"
            else:
                sub = rng.choice(SUBJECTS)
            req = [sub, gen_value(rng, patterns), gen_value(rng, patterns), gen_value(rng, patterns)]
        reqs.append(tuple(clean(x) for x in req))
        if rng.random() < 0.03 and len(reqs) + 1 < count:
            # CachedEnforcer keys requests by their fields joined with "$$": a colliding pair
            # (f[k] + "$$" + x, f[k+1]) and (f[k], x + "$$" + f[k+1]).
            f = list(reqs.pop())
            k = rng.randrange(3)
            x = rng.choice(["", "x", "get", "a/b"])
            f2 = list(f)
            f2[k] = f[k] + "$$" + x
            f[k + 1] = x + "$$" + f[k + 1]
            pair = [tuple(f), tuple(f2)]
            rng.shuffle(pair)
            reqs.extend(pair)
    return reqs[:count]


# ---------------------------------------------------------------- running the tools

class Tools:
    def __init__(self, ours, oracle):
        self.ours = ours
        self.oracle = oracle
        self.runs = 0
        self.lock = threading.Lock()

    def run(self, which, policy, mode, default_role, requests, plain=False):
        """('ok', [answers]) | ('refused', message) | ('broken', message)."""
        with self.lock:
            self.runs += 1
        exe = self.ours if which == "ours" else self.oracle
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False, encoding="utf-8", newline="") as f:
            f.write(policy)
            path = f.name
        try:
            cmd = [exe] if which == "ours" else [exe, "rbac-eval"]
            cmd += ["--policy", path]
            cmd += ["--match-mode", mode]
            if default_role is not None:
                cmd += ["--default-role", default_role]
            if plain and which == "oracle":
                cmd += ["--enforcer", "plain"]
            stdin = "".join(",".join(req_field(x) for x in r) + "\n" for r in requests)
            try:
                p = subprocess.run(cmd, input=stdin.encode("utf-8"), capture_output=True, timeout=TOOL_TIMEOUT)
            except subprocess.TimeoutExpired:
                return ("broken", "timeout")
            out = p.stdout.decode("utf-8", "replace").splitlines()
            err = p.stderr.decode("utf-8", "replace").strip()
            if p.returncode != 0:
                first = err.splitlines()[0] if err else f"exit {p.returncode}"
                if len(out) == 0:
                    return ("refused", first)
                return ("broken", f"exit {p.returncode} after {len(out)} answers: {first}")
            if len(out) != len(requests):
                return ("broken", f"{len(out)} answers for {len(requests)} requests: {err[:200]}")
            return ("ok", out)
        finally:
            os.unlink(path)


def outcome_key(ours, oracle, idx=None):
    """What a mismatch looks like, to be kept while shrinking."""
    if ours[0] != "ok" or oracle[0] != "ok":
        return ("load", ours[0], oracle[0])
    return ("answer", ours[1][idx], oracle[1][idx])


# ---------------------------------------------------------------- shrinking

def policy_lines(text):
    return text.split("\n")


def split_csv(line):
    """encoding/csv with TrimLeadingSpace, for our own heuristics only (None if it does not parse)."""
    fields = []
    rest = line
    while True:
        rest = rest.lstrip()
        if rest.startswith('"'):
            i = 1
            buf = []
            while True:
                j = rest.find('"', i)
                if j == -1:
                    return None
                buf.append(rest[i:j])
                if rest[j + 1:j + 2] == '"':
                    buf.append('"')
                    i = j + 2
                    continue
                rest = rest[j + 1:]
                break
            fields.append("".join(buf))
            if rest.startswith(","):
                rest = rest[1:]
                continue
            if rest.strip() == "":
                return fields
            return None
        j = rest.find(",")
        if j == -1:
            fields.append(rest)
            return fields
        fields.append(rest[:j])
        rest = rest[j + 1:]


def join_csv(fields):
    out = []
    for f in fields:
        if "," in f or '"' in f or f[:1].isspace() or f.startswith("#") or f == "":
            out.append('"' + f.replace('"', '""') + '"')
        else:
            out.append(f)
    return ", ".join(out)


class Shrinker:
    def __init__(self, tools, mode, budget):
        self.tools = tools
        self.mode = mode
        self.budget = budget

    def check(self, case, want, plain=False):
        """Whether `case` still shows the mismatch `want`."""
        if self.budget <= 0:
            return False
        self.budget -= 1
        policy, default_role, reqs = case
        ours = self.tools.run("ours", policy, self.mode, default_role, reqs)
        oracle = self.tools.run("oracle", policy, self.mode, default_role, reqs, plain=plain)
        if want[0] == "load":
            return outcome_key(ours, oracle) == want
        if ours[0] != "ok" or oracle[0] != "ok":
            return False
        return outcome_key(ours, oracle, len(reqs) - 1) == want

    def shrink(self, policy, default_role, reqs, want):
        """Returns the smallest case found: (policy, default_role, reqs)."""
        return self.fine(self.coarse(policy, default_role, reqs, want), want)

    def coarse(self, policy, default_role, reqs, want):
        """Drops requests, policy lines and the default role while the mismatch stays."""
        case = (policy, default_role, reqs)
        if want[0] == "answer":
            # the failing request alone, if it does not depend on earlier ones
            single = (policy, default_role, reqs[-1:])
            if self.check(single, want):
                case = single
            else:
                case = self.drop_requests(case, want)
        case = self.drop_lines(case, want)
        if case[1] is not None and self.check((case[0], None, case[2]), want):
            case = (case[0], None, case[2])
        return case

    def fine(self, case, want):
        """Shrinks the characters of fields, request values and the default role."""
        for _ in range(3):
            before = case
            case = self.shrink_fields(case, want)
            case = self.drop_lines(case, want)
            if case == before or self.budget <= 0:
                break
        return case

    def drop_requests(self, case, want):
        policy, dr, reqs = case
        i = 0
        while i < len(reqs) - 1:
            cand = reqs[:i] + reqs[i + 1:]
            if self.check((policy, dr, cand), want):
                reqs = cand
            else:
                i += 1
        return (policy, dr, reqs)

    def drop_lines(self, case, want):
        policy, dr, reqs = case
        lines = policy_lines(policy)
        changed = True
        while changed and self.budget > 0:
            changed = False
            i = 0
            while i < len(lines):
                cand = lines[:i] + lines[i + 1:]
                if self.check(("\n".join(cand), dr, reqs), want):
                    lines = cand
                    changed = True
                else:
                    i += 1
        # normalise CRLF / trailing blank lines when that keeps the mismatch
        text = "\n".join(lines)
        for cand in (text.replace("\r\n", "\n").strip("\n") + "\n",):
            if cand != text and self.check((cand, dr, reqs), want):
                text = cand
        return (text, dr, reqs)

    def shrink_string(self, s, accept):
        """Greedy character deletion (chunks, then single characters)."""
        chunk = max(1, len(s) // 2)
        while chunk >= 1 and self.budget > 0:
            i = 0
            progressed = False
            while i < len(s) and self.budget > 0:
                cand = s[:i] + s[i + chunk:]
                if accept(cand):
                    s = cand
                    progressed = True
                else:
                    i += chunk
            if not progressed:
                chunk //= 2
        return s

    def shrink_shared(self, case, want):
        """Shrinks every value that occurs in more than one place (a subject and
        its role binding, a pattern and the request value it must equal) at once."""
        policy, dr, reqs = case
        lines = policy_lines(policy)
        parsed = [split_csv(l.strip()) for l in lines]
        count = {}
        for fields in parsed:
            if fields and len(fields) >= 2 and fields[0] in ("p", "g"):
                for v in fields[1:]:
                    count[v] = count.get(v, 0) + 1
        for r in reqs:
            for v in r:
                count[v] = count.get(v, 0) + 1
        if dr:
            count[dr] = count.get(dr, 0) + 1
        shared = sorted((v for v, n in count.items() if n >= 2 and v not in ("allow", "deny", "")),
                        key=lambda v: -len(v))

        def build(state, old, new):
            pol, d, rq = state
            out = []
            for line, fields in zip(policy_lines(pol), [split_csv(l.strip()) for l in policy_lines(pol)]):
                if fields and len(fields) >= 2 and fields[0] in ("p", "g") and old in fields[1:]:
                    keep_eft = fields[0] == "p" and len(fields) == 6 and fields[5] in ("allow", "deny")
                    nf = [fields[0]] + [new if (v == old and not (keep_eft and i == 5)) else v
                                        for i, v in enumerate(fields[1:], 1)]
                    out.append(join_csv(nf))
                else:
                    out.append(line)
            nd = new if d == old else d
            nrq = [tuple(new if v == old else v for v in r) for r in rq]
            return ("\n".join(out), nd, nrq)

        state = case
        for v in shared:
            if self.budget <= 0:
                break
            if not self.check(build(state, v, v), want):
                continue  # the canonical form of the lines loses the mismatch
            state = build(state, v, v)
            cur = [state]

            def accept(c, v=v):
                cand = build(cur[0], v, c)
                if self.check(cand, want):
                    return True
                return False

            best = self.shrink_string(v, accept)
            if best != v:
                state = build(state, v, best)
        return state

    def shrink_fields(self, case, want):
        case = self.shrink_shared(case, want)
        policy, dr, reqs = case
        lines = policy_lines(policy)
        for li in range(len(lines)):
            fields = split_csv(lines[li].strip())
            if not fields or len(fields) < 2 or fields[0] not in ("p", "g"):
                continue
            canon = list(lines)
            canon[li] = join_csv(fields)
            if canon[li] != lines[li]:
                if not self.check(("\n".join(canon), dr, reqs), want):
                    continue
                lines = canon
            for fi in range(1, len(fields)):
                if fields[0] == "p" and fi == 5 and fields[5] in ("allow", "deny"):
                    continue  # keep the effect: shrinking it would change what the line means

                def accept(v):
                    nf = list(fields)
                    nf[fi] = v
                    nl = list(lines)
                    nl[li] = join_csv(nf)
                    return self.check(("\n".join(nl), dr, reqs), want)

                v = self.shrink_string(fields[fi], accept)
                if v != fields[fi]:
                    fields[fi] = v
                    lines[li] = join_csv(fields)
        policy = "\n".join(lines)
        if want[0] == "load":
            return (policy, dr, reqs)
        reqs = list(reqs)
        for ri in range(len(reqs)):
            for fi in range(4):
                def accept(v):
                    r = list(reqs[ri])
                    r[fi] = v
                    return self.check((policy, dr, reqs[:ri] + [tuple(r)] + reqs[ri + 1:]), want)

                v = self.shrink_string(reqs[ri][fi], accept)
                r = list(reqs[ri])
                r[fi] = v
                reqs[ri] = tuple(r)
        if dr:
            dr = self.shrink_string(dr, lambda v: self.check((policy, v, reqs), want))
        return (policy, dr, reqs)


# ---------------------------------------------------------------- classification

def all_rules(policy):
    out = []
    for line in policy_lines(policy):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        f = split_csv(s)
        if f:
            out.append(f)
    return out


GLOB_FEATURES = [
    ("super", lambda p: "**" in p), ("star", lambda p: "*" in p), ("single", lambda p: "?" in p),
    ("class", lambda p: "[" in p), ("braces", lambda p: "{" in p), ("escape", lambda p: "\\" in p),
    ("fffd", lambda p: "\ufffd" in p), ("non-ascii", lambda p: any(ord(c) > 127 for c in p)),
    ("comma/close", lambda p: "," in p or "}" in p), ("space", lambda p: p != p.strip()),
]
def regex_valid(tools, which, pattern):
    """Whether `which` accepts `pattern` as a regex (an invalid one reached denies the check)."""
    policy = join_csv(["p", "s", ".*", "", "", "allow"]) + "\n" + join_csv(["p", "s", pattern, "", "", "allow"]) + "\n"
    res = tools.run(which, policy, "regex", None, [("s", "", "", "")])
    return res[0] == "ok" and res[1][0] == "allow"


def asciified(case):
    """The case with every non-ASCII character replaced by an unused ASCII letter."""
    policy, dr, reqs = case
    text = policy + (dr or "") + "".join("".join(r) for r in reqs)
    spare = [c for c in "QXZJVWYKUHqxzjvwykuh0123456789" if c not in text]
    table = {}

    def conv(s):
        out = []
        for c in s:
            if ord(c) > 127:
                if c not in table:
                    if not spare:
                        return None
                    table[c] = spare.pop(0)
                out.append(table[c])
            else:
                out.append(c)
        return "".join(out)

    p2 = conv(policy)
    d2 = conv(dr) if dr is not None else None
    r2 = [tuple(conv(x) for x in r) for r in reqs]
    if p2 is None or (dr is not None and d2 is None) or any(x is None for r in r2 for x in r):
        return None
    return (p2, d2, r2)


def pair_answers(tools, mode, pattern, value):
    """Both tools' answers for one pattern against one value (in the resource field)."""
    other = "*" if mode == "glob" else ""
    policy = join_csv(["p", "s", pattern, other, other, "allow"]) + "\n"
    req = [("s", value, "x", "x")]
    o = tools.run("ours", policy, mode, None, req)
    g = tools.run("oracle", policy, mode, None, req)
    return (o[1][0] if o[0] == "ok" else o[0]), (g[1][0] if g[0] == "ok" else g[0])


def check_fails(tools, which, mode, pattern, value):
    """Whether matching `pattern` against `value` makes the whole check fail (a panic in
    the oracle): a line allowing everything does not help."""
    other = "*" if mode == "glob" else ""
    policy = (join_csv(["p", "s", other, other, other, "allow"]) + "\n"
              + join_csv(["p", "s", pattern, other, other, "allow"]) + "\n")
    res = tools.run(which, policy, mode, None, [("s", value, "x", "x")])
    return res[0] == "ok" and res[1][0] == "deny"


def classify(tools, mode, kind, case, order_dependent, cache_collision):
    policy, default_role, reqs = case
    if kind[0] == "broken":
        return "broken"
    if kind[0] == "load":
        return "load:ours-refuses" if kind[1] != "ok" else "load:oracle-refuses"
    if cache_collision:
        return "oracle:cache-key-collision"
    if order_dependent:
        return "order-dependent"
    rules = all_rules(policy)
    ps = [r for r in rules if r[0] == "p" and len(r) == 6]
    if not ps:
        return "casbin:no-p-lines"
    keys = {}
    for r in rules:
        k = (r[0], ",".join(r[1:]))
        if k in keys and keys[k] != r:
            return "casbin:dedup-comma-key"
        keys[k] = r
    pats = [pat for r in ps for pat in r[2:5]]
    if mode == "regex":
        odd = []
        for pat in dict.fromkeys(pats):
            vo, vg = regex_valid(tools, "ours", pat), regex_valid(tools, "oracle", pat)
            if vo != vg:
                odd.append(f"{'ours-accepts/go-rejects' if vo else 'ours-rejects/go-accepts'} {pat!r}")
        if odd:
            return "regex:validity " + "; ".join(odd)
    # one pattern against one value of the failing request that the tools already disagree on
    req = reqs[-1]
    pairs = []
    for r in ps:
        for k in range(3):
            if (r[2 + k], req[1 + k]) not in pairs:
                pairs.append((r[2 + k], req[1 + k]))
    for pat, val in pairs:
        o, g = pair_answers(tools, mode, pat, val)
        if o == g:
            continue
        what = f"{pat!r} ~ {val!r}"
        if mode == "regex":
            return f"regex:semantics {what}"
        if "\ufffd" in pat:
            return f"glob:U+FFFD in pattern {what}"
        if check_fails(tools, "oracle", mode, pat, val) and not check_fails(tools, "ours", mode, pat, val):
            return f"glob:gobwas panics in Match (check fails) {what}"
        asc = asciified((pat, None, [(val,)]))
        if asc is not None and (asc[0] != pat or asc[2][0][0] != val):
            o2, g2 = pair_answers(tools, mode, asc[0], asc[2][0][0])
            if o2 == g2:
                return f"glob:non-ASCII (gobwas byte/rune offsets) {what}"
        if val == "" and g == "allow" and o == "deny":
            return f"glob:single-character matcher matches the empty value {what}"
        if "{" in pat:
            if re.search(r"\{\}|\{,|,\}|,,", pat) or pat.count("{") > pat.count("}"):
                return f"glob:braces with an empty or unclosed alternative {what}"
            return f"glob:braces {what}"
        return f"glob:other {what}"
    if any(r[5] not in ("allow", "deny") for r in ps):
        return "effect:nonstandard"
    return f"{mode}:combination (no single pattern/value pair disagrees)"


def to_ascii(s):
    return "".join(c if ord(c) < 128 else "QXZJV"[ord(c) % 5] for c in s)


CLASS_COUNTS = {}
CLASS_LOCK = threading.Lock()


def shrink_and_classify(args, tools, index, mode, want, policy, default_role, reqs):
    sh = Shrinker(tools, mode, args.shrink_budget)
    order_dependent = cache_collision = False
    if want[0] == "answer":
        order_dependent = not sh.check((policy, default_role, reqs[-1:]), want)
        if order_dependent:
            cache_collision = not sh.check((policy, default_role, reqs), want, plain=True)
    case = sh.coarse(policy, default_role, reqs, want)
    cls = classify(tools, mode, want, case, len(case[2]) > 1, cache_collision)
    key = cls.split(" '")[0]  # without the patterns: how much of this kind was already shrunk
    with CLASS_LOCK:
        CLASS_COUNTS[key] = CLASS_COUNTS.get(key, 0) + 1
        fine = CLASS_COUNTS[key] <= args.fine_per_class
    if fine:
        case = sh.fine(case, want)
        cls = classify(tools, mode, want, case, len(case[2]) > 1, cache_collision)
    o2 = tools.run("ours", case[0], mode, case[1], case[2])
    r2 = tools.run("oracle", case[0], mode, case[1], case[2])
    f = finding(index, mode, want, case[0], case[1], case[2], o2, r2, cls, (policy, default_role))
    f["fine"] = fine
    return f


def run_round(index, args, tools):
    rng = random.Random(f"{args.seed}:{index}")
    pol = gen_policy(rng)
    policy, default_role = pol.text, pol.default_role
    reqs = gen_requests(rng, pol, args.requests)
    if ASCII_ONLY:
        policy = to_ascii(policy)
        default_role = to_ascii(default_role) if default_role is not None else None
        reqs = [tuple(to_ascii(x) for x in r) for r in reqs]
    pick = random.Random(f"{args.seed}:{index}:pick")
    result = {"index": index, "modes": {}, "findings": [], "requests": 0, "skipped": 0}
    for mode in args.modes:
        ours = tools.run("ours", policy, mode, default_role, reqs)
        oracle = tools.run("oracle", policy, mode, default_role, reqs)
        info = {"ours": ours[0], "oracle": oracle[0], "mismatches": 0}
        result["modes"][mode] = info
        if ours[0] == "broken" or oracle[0] == "broken":
            result["findings"].append(finding(index, mode, ("broken", ours[0], oracle[0]), policy, default_role,
                                              reqs, ours, oracle, "broken", None))
            continue
        if oracle[0] == "refused" and ours[0] == "refused":
            result["skipped"] += 1
            continue
        if ours[0] != oracle[0]:
            info["mismatches"] += 1
            result["findings"].append(shrink_and_classify(args, tools, index, mode, outcome_key(ours, oracle),
                                                          policy, default_role, []))
            continue
        result["requests"] += len(reqs)
        info["allow"] = oracle[1].count("allow")
        info["compared"] = len(reqs)
        bad = [i for i in range(len(reqs)) if ours[1][i] != oracle[1][i]]
        info["mismatches"] = len(bad)
        for i in sorted(pick.sample(bad, min(len(bad), args.shrink_per_round))):
            result["findings"].append(shrink_and_classify(args, tools, index, mode, outcome_key(ours, oracle, i),
                                                          policy, default_role, reqs[: i + 1]))
    return result


def finding(index, mode, want, policy, default_role, reqs, ours, oracle, cls, original):
    return {
        "round": index, "mode": mode, "kind": list(want), "class": cls, "policy": policy,
        "default_role": default_role, "requests": [list(r) for r in reqs],
        "ours": ours[1] if ours[0] == "ok" else f"{ours[0]}: {ours[1]}",
        "oracle": oracle[1] if oracle[0] == "ok" else f"{oracle[0]}: {oracle[1]}",
        "original_policy": original[0] if original else None,
    }


def show(f, out=sys.stdout):
    print(f"--- class {f['class']}  (round {f['round']}, mode {f['mode']})", file=out)
    print("policy.csv:", file=out)
    for line in f["policy"].rstrip("\n").split("\n"):
        print("    " + (repr(line)[1:-1] + "    # (Python escapes)" if needs_repr(line) else line), file=out)
    if f["default_role"] is not None:
        print(f"default role: {f['default_role']!r}", file=out)
    print("requests (sub,res,act,obj):", file=out)
    for r in f["requests"]:
        print("    " + ",".join(req_field(x) for x in r) + ("    # " + repr(tuple(r)) if any(needs_repr(x) for x in r) else ""),
              file=out)
    ours, oracle = f["ours"], f["oracle"]
    if isinstance(ours, list) and isinstance(oracle, list):
        print(f"ours: {ours[-1]}   oracle: {oracle[-1]}   (last request)", file=out)
    else:
        print(f"ours: {ours}\noracle: {oracle}", file=out)


def needs_repr(s):
    return any(c in s for c in "\t\r\u00a0\u2003\ufffd") or s != s.rstrip(" ")


def signature(f):
    return (f["mode"], tuple(f["kind"]), f["policy"], f["default_role"], tuple(map(tuple, f["requests"])))


def write_repro(outdir, n, f, ours_exe, oracle_exe):
    key = re.sub(r"[^A-Za-z0-9_.+-]+", "_", f["class"].split(" '")[0])[:60]
    d = os.path.join(outdir, f"{n:04d}-{key}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "policy.csv"), "w", encoding="utf-8", newline="") as fh:
        fh.write(f["policy"])
    with open(os.path.join(d, "requests.txt"), "w", encoding="utf-8") as fh:
        for r in f["requests"]:
            fh.write(",".join(req_field(x) for x in r) + "\n")
    flags = (" --match-mode regex" if f["mode"] == "regex" else "")
    if f["default_role"] is not None:
        flags += " --default-role " + shlex_quote(f["default_role"])
    with open(os.path.join(d, "cmd.sh"), "w", encoding="utf-8") as fh:
        fh.write("#!/bin/sh\ncd \"$(dirname \"$0\")\"\n")
        fh.write(f"echo ours:; {shlex_quote(ours_exe)} --policy policy.csv{flags} < requests.txt\n")
        fh.write(f"echo oracle:; {shlex_quote(oracle_exe)} rbac-eval --policy policy.csv{flags} < requests.txt\n")
    os.chmod(os.path.join(d, "cmd.sh"), 0o755)
    with open(os.path.join(d, "finding.json"), "w", encoding="utf-8") as fh:
        json.dump(f, fh, ensure_ascii=False, indent=1)


def shlex_quote(s):
    import shlex
    return shlex.quote(s)


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--requests", type=int, default=80)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--time-limit", type=float, default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--shrink-budget", type=int, default=400)
    ap.add_argument("--shrink-per-round", type=int, default=2,
                    help="mismatching requests shrunk per policy and mode, picked at random (default 2)")
    ap.add_argument("--fine-per-class", type=int, default=10,
                    help="after this many findings of one kind, only drop lines/requests (default 10)")
    ap.add_argument("--only", type=int, default=None)
    ap.add_argument("--flavors", default="glob:2,regex:3,mixed:1",
                    help="weights of policy flavours: glob patterns, regex patterns, both (default glob:2,regex:3,mixed:1)")
    ap.add_argument("--ascii-only", action="store_true",
                    help="replace every non-ASCII character by an ASCII letter (finds what non-ASCII mismatches hide)")
    ap.add_argument("--modes", default="glob,regex")
    ap.add_argument("--show-per-class", type=int, default=2, help="repros printed per class (all go to --out)")
    ap.add_argument("--labels-per-class", type=int, default=15, help="pattern/value variants listed per class")
    ap.add_argument("--ours", default=None)
    ap.add_argument("--oracle", default=os.path.expanduser("~/.cache/peer-go/peer-go"))
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    global ASCII_ONLY
    ASCII_ONLY = args.ascii_only
    try:
        weights = {k: float(v) for k, v in (kv.split(":") for kv in args.flavors.split(","))}
    except ValueError:
        ap.error("bad --flavors")
    if not weights or any(k not in ("glob", "regex", "mixed") or v < 0 for k, v in weights.items()) \
            or sum(weights.values()) <= 0:
        ap.error("bad --flavors")
    FLAVOR_WEIGHTS.clear()
    FLAVOR_WEIGHTS.update(weights)
    if any(m not in MODES for m in args.modes) or args.rounds < 0 or args.requests < 1:
        ap.error("bad --modes/--rounds/--requests")
    if args.ours is None:
        for cand in ("target/x86_64-unknown-linux-gnu/release/examples/rbac_eval", "target/release/examples/rbac_eval"):
            if os.path.exists(os.path.join(REPO, cand)):
                args.ours = os.path.join(REPO, cand)
                break
    for name, exe in (("ours", args.ours), ("oracle", args.oracle)):
        if not exe or not os.access(exe, os.X_OK):
            print(f"rbac_diff: {name} tool not found ({exe}); see the usage notes (--help)", file=sys.stderr)
            return 2
    tools = Tools(args.ours, args.oracle)
    if args.out:
        shutil.rmtree(args.out, ignore_errors=True)
        os.makedirs(args.out)

    start = time.monotonic()
    indices = [args.only] if args.only is not None else list(range(args.rounds))
    results = []
    stop = threading.Event()

    def job(i):
        if stop.is_set() or (args.time_limit and time.monotonic() - start > args.time_limit):
            stop.set()
            return None
        return run_round(i, args, tools)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        futs = [ex.submit(job, i) for i in indices]
        done = 0
        for fut in futs:
            r = fut.result()
            if r is None:
                continue
            results.append(r)
            done += 1
            if args.verbose or args.only is not None:
                print(f"round {r['index']}: " + ", ".join(
                    f"{m}: ours={v['ours']} oracle={v['oracle']} mismatches={v['mismatches']}"
                    for m, v in r["modes"].items()), file=sys.stderr)
            elif done % 100 == 0:
                print(f"[{time.monotonic() - start:.0f}s] {done} rounds, "
                      f"{sum(len(x['findings']) for x in results)} findings", file=sys.stderr)

    # ---------------- report
    by_class = {}
    seen = set()
    for r in sorted(results, key=lambda r: r["index"]):
        for f in r["findings"]:
            key = f["class"].split(" '")[0]
            c = by_class.setdefault(key, {"count": 0, "distinct": [], "labels": {}})
            c["count"] += 1
            c["labels"][f["class"]] = c["labels"].get(f["class"], 0) + 1
            sig = signature(f)
            if sig not in seen:
                seen.add(sig)
                c["distinct"].append(f)

    n = 0
    for key in sorted(by_class):
        c = by_class[key]
        print(f"\n===== {key}: {c['count']} shrunk mismatch(es), {len(c['distinct'])} distinct repro(s)")
        if len(c["labels"]) > 1 or next(iter(c["labels"])) != key:
            for label, cnt in sorted(c["labels"].items(), key=lambda kv: (-kv[1], kv[0]))[:args.labels_per_class]:
                print(f"  {cnt:4d} x {label[len(key):].strip()}")
            if len(c["labels"]) > args.labels_per_class:
                print(f"  ... {len(c['labels']) - args.labels_per_class} more")
        # smallest fully shrunk repros first
        c["distinct"].sort(key=lambda f: (not f.get("fine", True), len(f["policy"]) + sum(len("".join(r)) for r in f["requests"])))
        for k, f in enumerate(c["distinct"]):
            n += 1
            if args.out:
                write_repro(args.out, n, f, args.ours, args.oracle)
            if k < args.show_per_class:
                show(f)

    modes_run = sum(len(r["modes"]) for r in results)
    mism_answers = sum(v["mismatches"] for r in results for m, v in r["modes"].items()
                       if v["ours"] == "ok" and v["oracle"] == "ok")
    load_dis = sum(1 for r in results for m, v in r["modes"].items() if v["ours"] != v["oracle"])
    skipped = sum(r["skipped"] for r in results)
    print("\n===== summary")
    print(f"seed {args.seed}; policies {len(results)} (x {len(args.modes)} modes = {modes_run} policy runs, "
          f"{skipped} refused by both and skipped)")
    print(f"requests compared: {sum(r['requests'] for r in results)}; mismatching answers: {mism_answers}; "
          f"load disagreements: {load_dis}; tool runs: {tools.runs}; {time.monotonic() - start:.0f}s")
    for mode in args.modes:
        tot = sum(r["modes"][mode].get("compared", 0) for r in results if mode in r["modes"])
        allow = sum(r["modes"][mode].get("allow", 0) for r in results if mode in r["modes"])
        print(f"  {mode}: {tot} requests compared, oracle allowed {allow} ({100.0 * allow / max(tot, 1):.1f}%)")
    print("mismatch classes (shrunk cases; identical minimal repros counted once as distinct):")
    for key in sorted(by_class):
        print(f"  {key}: {by_class[key]['count']} shrunk, {len(by_class[key]['distinct'])} distinct, "
              f"{len(by_class[key]['labels'])} pattern/value variants")
    if args.out:
        print(f"repros written to {args.out}/")
    return 1 if (mism_answers or load_dis or by_class) else 0


if __name__ == "__main__":
    sys.exit(main())
