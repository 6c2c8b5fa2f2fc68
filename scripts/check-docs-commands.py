#!/usr/bin/env python3
"""scripts/check-docs-commands.py WEFT [ROOT] — every `./build/weft ...` command of README.md and
docs/*.md parses.

A command is a line of a code block (indented by four spaces or more, or inside a ``` fence), or an
inline code span of the prose, that starts, after an optional `$ ` prompt, optional VAR=value
assignments and an optional `mpirun ... ` launcher, with `./build/weft` (or `build/weft`). Continuation lines (a trailing
backslash) are joined, shell comments dropped, and the command is cut at the first shell operator
(`|`, `>`, `<`, `&&`, `;`, `&`); a `...` argument (the docs' "and so on") is left out. Each command
then runs as WEFT (the built binary) with WEFT_PARSE_ONLY=1: it stops once its arguments are parsed
and checked, loads and writes nothing, and does not look at input files, so placeholders such as
M.gguf pass. Any command that exits non-zero is reported as FILE:LINE with weft's message; the
script exits 1 if there is one, 0 otherwise.

--self-test runs the same checks on a made-up page with a good and a bad command and fails unless
exactly the bad one is reported (so this check cannot pass by checking nothing).
"""
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

OPERATORS = {'|', '||', '&', '&&', ';', ';;', '>', '>>', '<', '<<', '>&', '<&', '(', ')', '|&'}
WEFT_WORD = re.compile(r'^(\./)?build/weft$')


def code_lines(text):
    """(line number, text) of every line inside a code block: a ``` fence or four-space indent."""
    in_fence = False
    previous_blank = True
    in_indented = False
    for number, line in enumerate(text.split('\n'), 1):
        stripped = line.strip()
        if stripped.startswith('```'):
            in_fence = not in_fence
            previous_blank = False
            continue
        if in_fence:
            yield number, line
            continue
        indented = line.startswith('    ') and stripped != ''
        # an indented block starts after a blank line (a wrapped list item's lines are not code)
        if indented and (previous_blank or in_indented):
            in_indented = True
            yield number, line
        elif stripped != '':
            in_indented = False
        previous_blank = stripped == ''


def open_quotation(text):
    """Whether `text` ends inside a quotation (shell rules: no quotes inside single quotes)."""
    quote = None
    escaped = False
    for c in text:
        if escaped:
            escaped = False
        elif quote == "'":
            quote = None if c == "'" else quote
        elif c == '\\':
            escaped = True
        elif quote == '"':
            quote = None if c == '"' else quote
        elif c in '"\'':
            quote = c
        elif c == '#' and quote is None:
            break
    return quote is not None


def is_weft_command(text):
    """Whether `text` runs weft: after VAR=value assignments and an optional `mpirun ...`
    launcher, its first word is ./build/weft or build/weft."""
    words = text.split()
    start = 0
    while start < len(words) and re.match(r'^[A-Za-z_][A-Za-z0-9_]*=', words[start]):
        start += 1
    if start < len(words) and words[start] == 'mpirun':
        start = next((k for k in range(start, len(words)) if WEFT_WORD.match(words[k])), len(words))
    return start < len(words) and WEFT_WORD.match(words[start]) is not None


def commands(path):
    """(line number, command text) of every weft command of the markdown file at `path`: in code
    blocks, and inline code spans of the prose (`./build/weft serve`)."""
    text = open(path, encoding='utf-8').read()
    lines = list(code_lines(text))
    in_code = {number for number, _ in lines}
    for number, line in enumerate(text.split('\n'), 1):
        if number not in in_code:
            for span in re.findall(r'`([^`]+)`', line):
                # (`./build/weft ...` alone names the commands, it is not one)
                if is_weft_command(span) and not re.search(r'build/weft \.\.\.$', span):
                    yield number, span
    i = 0
    while i < len(lines):
        number, line = lines[i]
        text = line.strip()
        if text.startswith('$ '):
            text = text[2:].lstrip()
        # joined: continuation lines (a trailing backslash) and a quotation that goes on
        while i + 1 < len(lines) and lines[i + 1][0] == lines[i][0] + 1:
            if text.endswith('\\'):
                text = text[:-1] + ' ' + lines[i + 1][1].strip()
            elif open_quotation(text):
                text = text + '\n' + lines[i + 1][1].strip()
            else:
                break
            i += 1
        i += 1
        if is_weft_command(text):
            yield number, text


def argv_of(command):
    """The environment assignments and arguments after the weft word (None and a reason when the
    command's quoting is broken)."""
    # "2>file" and "2>&1": drop the descriptor number so that the cut at ">" leaves no stray "2"
    command = re.sub(r'(^|\s)\d+(?=[<>])', r'\1', command)
    # a bare `...` (the docs' "and so on") is left out; a quoted "..." is an argument
    try:
        raw = shlex.shlex(command, posix=False, punctuation_chars=True)
        raw.whitespace_split = True
        raw.commenters = '#'
        command = ' '.join(w for w in raw if w != '...')
    except ValueError as e:
        return None, None, 'cannot split it as a shell would: %s' % e
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = '#'
    try:
        words = list(lexer)
    except ValueError as e:
        return None, None, 'cannot split it as a shell would: %s' % e
    cut = next((k for k, w in enumerate(words) if w in OPERATORS), len(words))
    words = words[:cut]
    env = {}
    k = 0
    while k < len(words) and re.match(r'^[A-Za-z_][A-Za-z0-9_]*=', words[k]):
        name, value = words[k].split('=', 1)
        env[name] = value
        k += 1
    k = next(j for j in range(k, len(words)) if WEFT_WORD.match(words[j]))
    return env, words[k + 1:], None


def check(weft, files):
    """Runs every command of `files`; returns the list of failures as 'FILE:LINE: ...' strings."""
    failures = []
    count = 0
    for path in files:
        for number, command in commands(path):
            count += 1
            where = '%s:%d' % (path, number)
            env_assignments, args, problem = argv_of(command)
            if problem is None:
                env = dict(os.environ)
                env.update(env_assignments)
                env['WEFT_PARSE_ONLY'] = '1'
                try:
                    r = subprocess.run([weft] + args, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                       text=True, timeout=30)
                    if r.returncode != 0:
                        problem = 'exit %d: %s' % (r.returncode, (r.stderr or r.stdout).strip())
                except subprocess.TimeoutExpired:
                    problem = 'still running after 30 s with WEFT_PARSE_ONLY=1'
            if problem is not None:
                failures.append('%s: %s\n    %s' % (where, command, problem))
    return count, failures


def self_test(weft):
    page = '\n'.join([
        '# A page', '', 'Good, with a placeholder model, a comment, a pipe and a continuation:', '',
        '    $ ./build/weft run -m M.gguf -p "Once upon a time" \\', '        -n 16 --temp 0  # greedy',
        '    ./build/weft tokenize -m M.gguf -p "..." --ids | head -1', '', 'Bad:', '',
        '    ./build/weft run --no-such-option', '', 'Inline: `./build/weft run --no-such-option-either`, not code: ./build/weft run --bad-too', ''
    ])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'page.md')
        with open(path, 'w', encoding='utf-8') as f:
            f.write(page)
        count, failures = check(weft, [path])
    reported = sorted(f.split(' ')[0] for f in failures)
    if count != 4 or reported != [path + ':11:', path + ':13:']:
        print('self-test failed: %d commands found (want 4), failures: %s' % (count, failures))
        return 1
    print('self-test: 4 commands found, the two bad ones (lines 11 and 13) reported')
    return 0


def main():
    args = sys.argv[1:]
    if len(args) >= 1 and args[0] == '--self-test':
        return self_test(args[1])
    if not 1 <= len(args) <= 2:
        print(__doc__)
        return 2
    weft = os.path.abspath(args[0])
    root = args[1] if len(args) == 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    os.chdir(root)
    files = ['README.md'] + sorted(glob.glob('docs/*.md'))
    count, failures = check(weft, files)
    for f in failures:
        print(f)
    print('%d weft commands in %d files: %d do not parse' % (count, len(files), len(failures)))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
