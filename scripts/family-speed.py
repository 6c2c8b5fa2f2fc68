#!/usr/bin/env python3
"""scripts/family-speed.py — the speed of the 2026 families beside the 2026 reference engine.

For each family: `weft synth` writes a random-weight model of about 1B parameters (MoE families 1-3B
in all, with a few experts) in F16, `weft quantize` makes it Q4_K_M (MXFP4_MOE for gpt-oss), the
reference's llama-bench must load the file, and ../shared/bench/side-by-side.py measures pp512 and
tg128 of both engines in alternation. Prints one markdown table on stdout (progress on stderr):
family, type, size, the reference's and weft's tokens/s, the ratios weft / reference, and the
reference's version. Issue 39 item 7 asks for pp >= 1.5x and tg >= 1.15x.

    scripts/family-speed.py [--build build] [--dir /tmp/weft-families] [--families lfm2,mamba2]
                            [--rounds 2] [-r 3] [-t 2] [--keep]

Run it on a quiet machine: the timings of a shared one are noise. The models are written once and
reused while they exist in --dir (--keep also keeps the F16 files; without it they are deleted after
quantizing). --dry-run prints the synth and quantize commands of each family and writes nothing;
--check writes the models and checks that the reference loads each, measuring nothing.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
shared = os.path.join(os.path.dirname(root), 'shared')

# The shapes: near 1B parameters, the published models' proportions where synth can give them.
dense = ['--embd', '2048', '--layers', '16', '--heads', '32', '--kv-heads', '8', '--ff', '8192']
hybrid = ['--embd', '2048', '--heads', '16', '--kv-heads', '8', '--head-dim', '128']
moe = ['--experts', '16', '--experts-used', '4']
FAMILIES = [
    # name, synth arguments, the quantization
    ('mistral3', ['--arch', 'mistral3'] + dense, 'Q4_K_M'),
    ('smollm3', ['--arch', 'smollm3', '--embd', '2048', '--layers', '20', '--heads', '16', '--kv-heads', '4',
                 '--ff', '8192'], 'Q4_K_M'),
    ('lfm2', ['--arch', 'lfm2'] + dense, 'Q4_K_M'),
    ('mamba2', ['--arch', 'mamba2', '--embd', '2048', '--layers', '48', '--ssm-state', '128'], 'Q4_K_M'),
    ('granitehybrid', ['--arch', 'granitehybrid', '--embd', '2048', '--layers', '24', '--heads', '16',
                       '--kv-heads', '4', '--ff', '4096', '--ssm-state', '128'], 'Q4_K_M'),
    ('qwen35', ['--arch', 'qwen35'] + hybrid + ['--layers', '20', '--ff', '6144'], 'Q4_K_M'),
    ('qwen35moe', ['--arch', 'qwen35moe'] + hybrid + ['--layers', '16', '--ff', '1024'] + moe, 'Q4_K_M'),
    ('qwen3next', ['--arch', 'qwen3next'] + hybrid + ['--layers', '16', '--ff', '1024'] + moe, 'Q4_K_M'),
    ('glm4moe', ['--arch', 'glm4moe', '--embd', '2048', '--layers', '16', '--heads', '16', '--kv-heads', '4',
                 '--head-dim', '128', '--ff', '1024'] + moe, 'Q4_K_M'),
    ('gemma4', ['--arch', 'gemma4'] + dense, 'Q4_K_M'),
    ('llama4', ['--arch', 'llama4', '--embd', '2048', '--layers', '16', '--heads', '32', '--kv-heads', '8',
                '--ff', '1024'] + moe, 'Q4_K_M'),
    ('gpt-oss', ['--arch', 'gpt-oss', '--embd', '2048', '--layers', '16', '--heads', '32', '--kv-heads', '8',
                 '--head-dim', '64', '--ff', '1024'] + moe, 'MXFP4_MOE'),
]
SYNTH_COMMON = ['--vocab', '32000', '--seed', '7', '--type', 'f16']

ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
ap.add_argument('--build', default='build', help='build directory holding weft (default build)')
ap.add_argument('--dir', default='/tmp/weft-families', help='where the models are written')
ap.add_argument('--families', default='', help='comma-separated names (default: all of ' +
                ', '.join(f[0] for f in FAMILIES) + ')')
ap.add_argument('--reference', default=os.path.join(shared, 'bench', 'reference-2026'),
                help='the reference engine\'s folder (llama-bench and its libraries)')
ap.add_argument('--rounds', type=int, default=2, help='side-by-side rounds (alternating order)')
ap.add_argument('-r', '--repetitions', type=int, default=3)
ap.add_argument('-t', '--threads', type=int, default=2)
ap.add_argument('-p', '--n-prompt', type=int, default=512)
ap.add_argument('-n', '--n-gen', type=int, default=128)
ap.add_argument('--keep', action='store_true', help='keep the F16 files')
ap.add_argument('--dry-run', action='store_true', help='print the commands, write and run nothing')
ap.add_argument('--check', action='store_true',
                help='write the models and check that the reference loads each; measure nothing')
a = ap.parse_args()

weft = os.path.abspath(os.path.join(a.build, 'weft'))
llama_bench = os.path.join(a.reference, 'llama-bench')
side_by_side = os.path.join(shared, 'bench', 'side-by-side.py')
wanted = [f for f in a.families.split(',') if f]
unknown = [f for f in wanted if f not in [g[0] for g in FAMILIES]]
if unknown:
    sys.exit('family-speed: unknown families: %s (known: %s)' % (', '.join(unknown),
                                                                   ', '.join(f[0] for f in FAMILIES)))
families = [f for f in FAMILIES if not wanted or f[0] in wanted]


def log(*words):
    print(*words, file=sys.stderr, flush=True)


def run(cmd, **kw):
    log('+', ' '.join(cmd))
    return subprocess.run(cmd, check=True, **kw)


def model_file(name, quant):
    """Writes (or reuses) the family's quantized file and returns its path."""
    out = os.path.join(a.dir, '%s-%s.gguf' % (name, quant.lower()))
    if os.path.exists(out):
        return out
    f16 = os.path.join(a.dir, '%s-f16.gguf' % name)
    synth_args = next(f[1] for f in FAMILIES if f[0] == name) + SYNTH_COMMON
    if not os.path.exists(f16):
        run([weft, 'synth', f16] + synth_args, stdout=subprocess.DEVNULL)
    run([weft, 'quantize', f16, out, quant], stderr=subprocess.DEVNULL)
    if not a.keep:
        os.remove(f16)
    return out


def reference_libraries(tmp):
    """The reference's libraries by their versioned names: a copy of ../shared may hold its symbolic
    links as small text files naming the target, linked again here (as tests/data/families/record.sh)."""
    libs = os.path.join(tmp, 'lib')
    os.makedirs(libs)
    for name in sorted(os.listdir(a.reference)):
        if not name.startswith('lib') or '.so' not in name:
            continue
        path = os.path.join(a.reference, name)
        with open(path, 'rb') as f:
            head = f.read(64)
        small_text = os.path.getsize(path) < 64 and not head.startswith(b'\x7fELF')
        os.symlink(head.decode().strip() if small_text else os.path.realpath(path), os.path.join(libs, name))
    return libs


def snapshot_of_reference():
    """The reference's date from its README ('... as of 2026-08-18'), for a build without build info."""
    try:
        with open(os.path.join(a.reference, 'README.md')) as f:
            found = re.search(r'as of (\d{4}-\d{2}-\d{2})', f.read())
        return 'snapshot of %s' % found.group(1) if found else 'unknown'
    except OSError:
        return 'unknown'


def reference_loads(model):
    """(version, None) when the reference's llama-bench runs the file, else (None, its error)."""
    p = subprocess.run([llama_bench, '-m', model, '-t', str(a.threads), '-p', '8', '-n', '0', '-r', '1', '-o',
                        'json'], capture_output=True, text=True)
    try:
        row = json.loads(p.stdout)[0]
        if row.get('build_number') or row.get('build_commit', 'unknown') != 'unknown':
            return 'b%s (%s)' % (row.get('build_number', '?'), row.get('build_commit', '?')), None
        return snapshot_of_reference(), None
    except (ValueError, IndexError, KeyError):
        lines = [l for l in (p.stderr or p.stdout).splitlines() if 'error' in l.lower() or 'failed' in l.lower()]
        return None, (lines[-1] if lines else 'exit status %d' % p.returncode).strip()


def side_by_side_rows(model):
    """{'pp': (reference, weft), 'tg': (...)} from side-by-side.py's table."""
    p = run([sys.executable, side_by_side, '--weft', weft, '--reference', llama_bench, '-t', str(a.threads),
             '-r', str(a.repetitions), '-p', str(a.n_prompt), '-n', str(a.n_gen), '--rounds', str(a.rounds), model],
            capture_output=True, text=True)
    rows = {}
    for line in p.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) == 5 and cells[1][:2] in ('pp', 'tg'):
            try:
                rows[cells[1][:2]] = (float(cells[2]), float(cells[3]))
            except ValueError:
                pass
    if set(rows) != {'pp', 'tg'}:
        raise RuntimeError('side-by-side.py gave no pp/tg rows:\n' + p.stdout + p.stderr)
    return rows


if a.dry_run:
    for name, args, quant in families:
        f16 = os.path.join(a.dir, '%s-f16.gguf' % name)
        print(' '.join([weft, 'synth', f16] + args + SYNTH_COMMON))
        print(' '.join([weft, 'quantize', f16, os.path.join(a.dir, '%s-%s.gguf' % (name, quant.lower())), quant]))
    sys.exit(0)

for path, what in ((weft, 'weft (--build)'), (llama_bench, 'the reference\'s llama-bench (--reference)'),
                   (side_by_side, 'side-by-side.py')):
    if not os.path.exists(path):
        sys.exit('family-speed: %s not found: %s' % (what, path))
os.makedirs(a.dir, exist_ok=True)
with tempfile.TemporaryDirectory() as tmp:
    os.environ['LD_LIBRARY_PATH'] = reference_libraries(tmp) + (
        ':' + os.environ['LD_LIBRARY_PATH'] if os.environ.get('LD_LIBRARY_PATH') else '')
    pp, tg = 'pp%d' % a.n_prompt, 'tg%d' % a.n_gen
    print('| family | type | size | reference %s | reference %s | weft %s | weft %s | %s weft / ref | '
          '%s weft / ref | reference |' % (pp, tg, pp, tg, pp, tg))
    print('| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |', flush=True)
    for name, _, quant in families:
        model = model_file(name, quant)
        size = '%.2f GiB' % (os.path.getsize(model) / 2**30)
        version, refused = reference_loads(model)
        if refused:
            print('| %s | %s | %s | refused: %s | | | | | | |' % (name, quant, size, refused.replace('|', '/')),
                  flush=True)
            continue
        if a.check:
            print('| %s | %s | %s | loads | | | | | | %s |' % (name, quant, size, version), flush=True)
            continue
        r = side_by_side_rows(model)
        print('| %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s |' %
              (name, quant, size, r['pp'][0], r['tg'][0], r['pp'][1], r['tg'][1], r['pp'][1] / r['pp'][0],
               r['tg'][1] / r['tg'][0], version),
              flush=True)
