#!/usr/bin/env python3
"""scripts/speed-table.py — weft beside any llama-bench on the same files: the side-by-side speed table.

One command writes the table of docs/speed.md and the README: for each weight type, the 1.1B-shape
benchmark model (TinyLlama's shape, random weights: ../shared/bench/README.md) in that type, prompt
processing (pp) and generation (tg) tokens/s of the reference's llama-bench and of `weft bench`, run
in alternating order (reference first in odd rounds, weft first in even ones) so that a noisy machine
slows both alike, and the ratios weft / reference. --depth adds rows measured after a cache filled
with that many tokens (llama-bench -d, untimed in both engines), in the --cache-type cache.

    scripts/speed-table.py [--build build] [--reference PATH/llama-bench] [--types Q4_0,Q4_K_M]
                           [--depth 4096,16384] [--cache-type f16,q8_0] [--rounds 2] [-r 2] [-t 2]
                           [-p 512] [-n 128] [--dir /tmp/weft-bench] [--source FILE] [--reuse DIRS]
                           [--stat mean|best] [--save FILE] [--dry-run]

The files are DIR/tl-<type>.gguf (the F16 one is --source, default DIR/tl-F16.gguf, which
../shared/bench/make-models.sh writes), or one in a --reuse folder; a missing one is made from the F16
one with `weft quantize` (the types that need an importance matrix, IQ2_XS, get one from `weft imatrix`
over README.md first; MXFP4 is every weight mxfp4: `weft quantize --pure ... MXFP4_MOE`). Above the table it prints the
reference's version (llama-bench's build_commit and build_number), weft's commit, and the machine:
CPU model, logical CPUs, threads used and the load average before and after. Progress goes to stderr.
Run it on a quiet machine: the timings of a shared one are noise. --dry-run prints the commands and
runs nothing. Each cell is the mean of an engine's runs, or with --stat best its fastest run (both
engines by the same rule: on a shared VM the fastest run is the one least disturbed by neighbours).
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
shared = os.path.join(os.path.dirname(root), 'shared')

# type: (weft quantize's type, extra quantize flags, whether it needs an importance matrix)
TYPES = {
    'F16': None,
    'BF16': ('BF16', [], False),
    'Q8_0': ('Q8_0', [], False),
    'Q6_K': ('Q6_K', [], False),
    'Q5_K_M': ('Q5_K_M', [], False),
    'Q4_K_M': ('Q4_K_M', [], False),
    'Q4_0': ('Q4_0', [], False),
    'Q3_K_M': ('Q3_K_M', [], False),
    'Q2_K': ('Q2_K', [], False),
    'IQ4_XS': ('IQ4_XS', [], False),
    'IQ3_S': ('IQ3_S', [], False),
    'IQ2_XS': ('IQ2_XS', [], True),
    'MXFP4': ('MXFP4_MOE', ['--pure'], False),
}

ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
ap.add_argument('--build', default='build', help='build directory holding weft (default build)')
ap.add_argument('--reference', default=os.path.join(shared, 'bench', 'reference-2026', 'llama-bench'),
                help='the llama-bench to compare with (default ../shared/bench/reference-2026/llama-bench)')
ap.add_argument('--ref-args', default='', help='extra flags for llama-bench (e.g. "-fa 1")')
ap.add_argument('--types', default='F16,Q8_0,Q4_K_M,Q4_0',
                help='comma-separated types, of: ' + ', '.join(TYPES) + ' (default F16,Q8_0,Q4_K_M,Q4_0)')
ap.add_argument('--depth', default='', help='comma-separated cache depths for extra rows (e.g. 4096,16384)')
ap.add_argument('--cache-type', default='f16',
                help='comma-separated KV cache types (-ctk and -ctv of both engines) for the depth rows')
ap.add_argument('--depth-prompt', type=int, default=None, help='pp tokens of the depth rows (default -p; 0: none)')
ap.add_argument('--depth-gen', type=int, default=None, help='tg tokens of the depth rows (default -n; 0: none)')
ap.add_argument('--dir', default='/tmp/weft-bench', help='where the models are (and are made)')
ap.add_argument('--source', default='', help='the F16 model the others are made from (default DIR/tl-F16.gguf)')
ap.add_argument('--reuse', default='', help='comma-separated folders whose tl-<type>.gguf files are used where DIR has none')
ap.add_argument('-t', '--threads', type=int, default=2)
ap.add_argument('-r', '--repetitions', type=int, default=2, help='repetitions per run of each engine')
ap.add_argument('-p', '--n-prompt', type=int, default=512)
ap.add_argument('-n', '--n-gen', type=int, default=128)
ap.add_argument('--rounds', type=int, default=2, help='alternating rounds per row (default 2)')
ap.add_argument('--stat', choices=['mean', 'best'], default='mean',
                help='each cell: the mean of every run of an engine (default), or its best run (the least '
                     'disturbed one on a noisy machine: the same rule for both engines)')
ap.add_argument('--save', default='', help='also write every run of both engines to this JSON file')
ap.add_argument('--dry-run', action='store_true', help='print the commands, run nothing')
a = ap.parse_args()

weft = os.path.join(a.build, 'weft')
source = a.source or os.path.join(a.dir, 'tl-F16.gguf')
types = [t.strip().upper() for t in a.types.split(',') if t.strip()]
for t in types:
    if t not in TYPES:
        sys.exit('speed-table: unknown type %s (known: %s)' % (t, ', '.join(TYPES)))
depths = [int(d) for d in a.depth.split(',') if d.strip()]
cache_types = [c.strip() for c in a.cache_type.split(',') if c.strip()]


def log(msg):
    print('speed-table: ' + msg, file=sys.stderr, flush=True)


def run(cmd, env=None, fatal=True):
    """stdout of cmd; a failure ends the script, or (fatal=False: a measurement) is reported and gives ''."""
    if a.dry_run:
        print(' '.join(cmd))
        return ''
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        message = 'speed-table: %s failed (%d):\n%s' % (' '.join(cmd), r.returncode, r.stderr[-2000:])
        if fatal:
            sys.exit(message)
        log(message)
        return ''
    return r.stdout


def reference_env():
    """The reference's environment: its shared libraries beside it. Where a library "link" there is a
    small text file naming its target (a copy that lost its symbolic links), real links to the
    targets go in a private folder put first on LD_LIBRARY_PATH."""
    env = dict(os.environ)
    here = os.path.dirname(os.path.abspath(a.reference))
    links = tempfile.mkdtemp(prefix='speed-table-lib-')
    for name in os.listdir(here):
        path = os.path.join(here, name)
        if not name.startswith('lib') or '.so' not in name or os.path.islink(path) or os.path.getsize(path) > 255:
            continue
        with open(path, 'rb') as f:
            target = f.read().decode('utf-8', 'replace').strip()
        if target and '/' not in target and os.path.isfile(os.path.join(here, target)):
            os.symlink(os.path.join(here, target), os.path.join(links, name))
    env['LD_LIBRARY_PATH'] = os.pathsep.join(p for p in (links, here, env.get('LD_LIBRARY_PATH', '')) if p)
    return env


def model_of(t):
    if TYPES[t] is None:
        return source
    name = 'tl-%s.gguf' % t.lower()
    for folder in [d for d in a.reuse.split(',') if d]:
        if not os.path.exists(os.path.join(a.dir, name)) and os.path.exists(os.path.join(folder, name)):
            return os.path.join(folder, name)
    return os.path.join(a.dir, name)


def make_model(t):
    path = model_of(t)
    if os.path.exists(path):
        return path
    if not os.path.exists(source) and not a.dry_run:
        sys.exit('speed-table: %s is missing: make it with ../shared/bench/make-models.sh' % source)
    if TYPES[t] is None:  # the F16 source itself (dry run)
        return path
    qtype, flags, needs_imatrix = TYPES[t]
    cmd = [weft, 'quantize', '-t', str(a.threads)] + flags
    if needs_imatrix:
        imatrix = os.path.join(a.dir, 'tl-F16.imatrix')
        if not os.path.exists(imatrix):
            log('importance matrix of %s over README.md' % source)
            run([weft, 'imatrix', '-m', source, '-f', os.path.join(root, 'README.md'), '-o', imatrix, '-c', '512',
                 '--chunks', '4', '-t', str(a.threads)])
        cmd += ['--imatrix', imatrix]
    log('making %s with weft quantize' % path)
    run(cmd + [source, path, qtype])
    return path


def reference(model, depth, ctype, n_prompt, n_gen, env):
    cmd = [a.reference] + a.ref_args.split() + ['-m', model, '-t', str(a.threads), '-p', str(n_prompt), '-n',
                                                 str(n_gen), '-r', str(a.repetitions), '-o', 'json']
    if depth:
        cmd += ['-d', str(depth), '-ctk', ctype, '-ctv', ctype]
    out = run(cmd, env, fatal=False)
    res = {}
    for row in json.loads(out) if out else []:
        res['pp' if row['n_gen'] == 0 else 'tg'] = row.get('samples_ts') or [row['avg_ts']]
        res['version'] = '%s (build %s)' % (row.get('build_commit', '?'), row.get('build_number', '?'))
    return res


def weft_bench(model, depth, ctype, n_prompt, n_gen):
    cmd = [weft, 'bench', '-m', model, '-t', str(a.threads), '-p', str(n_prompt), '-n', str(n_gen), '-r',
           str(a.repetitions), '--json', '--no-bandwidth']
    if depth:
        cmd += ['-d', str(depth), '-ctk', ctype, '-ctv', ctype]
    out = run(cmd, fatal=False)
    if not out:
        return {}
    j = json.loads(out)
    return {test: j[test].get('runs') or [j[test]['tokens_per_s']] for test in ('pp', 'tg') if test in j}


def reference_snapshot():
    """The line of the reference's README.md that dates it ("... as of 2026-08-18 ..."), if any: its
    llama-bench may report its build as unknown."""
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(a.reference)), 'README.md')) as f:
            for line in f:
                if ' as of ' in line:  # the date only: the sentence goes on over the next lines
                    return 'snapshot as of ' + line.split(' as of ', 1)[1].split(',')[0].strip()
    except OSError:
        pass
    return ''


def load_average():
    try:
        return '%.2f' % os.getloadavg()[0]
    except OSError:
        return '?'


def cpu_model():
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def weft_commit():
    r = subprocess.run(['git', '-C', root, 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True)
    dirty = subprocess.run(['git', '-C', root, 'status', '--porcelain', '--untracked-files=no'], capture_output=True,
                           text=True).stdout.strip()
    return (r.stdout.strip() or '?') + (' (with uncommitted changes)' if dirty else '')


def mean(xs):
    return sum(xs) / len(xs) if xs else float('nan')


def statistic(runs):
    """One cell from every run of one engine (a list per round, each the t/s of its repetitions)."""
    xs = [x for r in runs for x in r]
    return (max(xs) if xs else float('nan')) if a.stat == 'best' else mean(xs)


if not os.path.exists(weft) and not a.dry_run:
    sys.exit('speed-table: %s is missing: build weft first (--build DIR)' % weft)
if not os.path.exists(a.reference) and not a.dry_run:
    sys.exit('speed-table: the reference %s is missing (--reference PATH/llama-bench)' % a.reference)
env = None if a.dry_run else reference_env()
load_before = load_average()
# rows: (type, depth, cache type, pp tokens, tg tokens)
rows = [(t, 0, 'f16', a.n_prompt, a.n_gen) for t in types]
rows += [(t, d, c, a.n_prompt if a.depth_prompt is None else a.depth_prompt,
          a.n_gen if a.depth_gen is None else a.depth_gen) for d in depths for c in cache_types
         for t in types]
results = []
version = '?'
for t, depth, ctype, n_prompt, n_gen in rows:
    model = make_model(t)
    runs = {'ref': [], 'weft': []}
    for i in range(a.rounds):
        for who in (['ref', 'weft'] if i % 2 == 0 else ['weft', 'ref']):
            log('%s on %s%s (round %d)' % (who, os.path.basename(model),
                                           ' @ d%d, %s cache' % (depth, ctype) if depth else '', i + 1))
            res = reference(model, depth, ctype, n_prompt, n_gen, env) if who == 'ref' else \
                weft_bench(model, depth, ctype, n_prompt, n_gen)
            version = res.pop('version', version)
            if res:
                runs[who].append(res)
    results.append((t, depth, ctype, n_prompt, n_gen, runs))
if a.dry_run:
    sys.exit(0)

if a.save:
    with open(a.save, 'w') as f:
        json.dump([{'type': t, 'depth': depth, 'cache': ctype, 'n_prompt': n_prompt, 'n_gen': n_gen, 'runs': runs}
                   for t, depth, ctype, n_prompt, n_gen, runs in results], f, indent=1)
size = {t: os.path.getsize(model_of(t)) / 2**30 for t in types}
print('reference: %s, version %s' % (a.reference, version))
if reference_snapshot():
    print('reference README.md: ' + reference_snapshot())
print('weft: %s at %s' % (weft, weft_commit()))
print('machine: %s, %d logical CPUs, %d threads; load average %s before, %s after' %
      (cpu_model(), os.cpu_count() or 0, a.threads, load_before, load_average()))
print('files: ' + ', '.join(model_of(t) for t in types))
print('each cell: %s of %d alternating round(s) of -r %d' %
      ('the best run' if a.stat == 'best' else 'the mean of the runs', a.rounds, a.repetitions))
print()
print('| type | size GiB | depth | cache | test | reference t/s | weft t/s | weft / reference |')
print('| --- | ---: | ---: | --- | --- | ---: | ---: | ---: |')
for t, depth, ctype, n_prompt, n_gen, runs in results:
    for test, n in (('pp', n_prompt), ('tg', n_gen)):
        if n == 0:  # not measured (-p 0 or -n 0)
            continue
        r = statistic([x[test] for x in runs['ref'] if test in x])
        w = statistic([x[test] for x in runs['weft'] if test in x])
        ratio = w / r if r == r and w == w and r > 0 else float('nan')  # nan: a failed engine
        print('| %s | %.2f | %d | %s | %s%d | %.2f | %.2f | %.2f |' % (t, size[t], depth, ctype, test, n, r, w,
                                                                    ratio))
