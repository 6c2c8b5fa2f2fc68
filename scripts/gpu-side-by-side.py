#!/usr/bin/env python3
"""GPU speed side by side: `weft bench --device DEV -ngl N` against the reference engine's Vulkan build.

usage: scripts/gpu-side-by-side.py --reference PATH/llama-bench [--weft build/weft] [--device Vulkan0]
                                   [-ngl 99] [-t 2] [-r 3] [-p 512] [-n 128] [--rounds 2] MODEL.gguf...

For a machine with a GPU (not run in CI: lavapipe's numbers mean nothing). The reference is a
llama.cpp build with -DGGML_VULKAN=ON (its `llama-bench`); both engines run alternately (ref, weft,
weft, ref ...) so a drifting machine slows both alike, and one markdown table is printed: pp and tg
tokens/s of each and weft / reference. Models: ../shared/bench/make-models.sh writes the 1.1B synth
(tl-F16, tl-q8_0, tl-q4_0, tl-q4_k_m). Without --reference, weft's figures alone.
"""
import argparse, json, os, statistics, subprocess, sys

ap = argparse.ArgumentParser()
ap.add_argument('models', nargs='+')
ap.add_argument('--weft', default=os.environ.get('WEFT', 'build/weft'))
ap.add_argument('--reference', default=os.environ.get('REFERENCE_VULKAN_BENCH', ''))
ap.add_argument('--device', default='Vulkan0')
ap.add_argument('-ngl', '--n-gpu-layers', type=int, default=99)
ap.add_argument('-t', '--threads', type=int, default=2)
ap.add_argument('-r', '--repetitions', type=int, default=3)
ap.add_argument('-p', '--n-prompt', type=int, default=512)
ap.add_argument('-n', '--n-gen', type=int, default=128)
ap.add_argument('--rounds', type=int, default=2)
a = ap.parse_args()
common = ['-t', str(a.threads), '-p', str(a.n_prompt), '-n', str(a.n_gen), '-r', str(a.repetitions)]


def reference(model):
    out = subprocess.run([a.reference, '-m', model, '-ngl', str(a.n_gpu_layers), '-o', 'json'] + common,
                         capture_output=True, text=True, check=True).stdout
    return {('pp' if row['n_gen'] == 0 else 'tg'): row['avg_ts'] for row in json.loads(out)}


def weft(model):
    out = subprocess.run([a.weft, 'bench', '-m', model, '--device', a.device, '-ngl', str(a.n_gpu_layers), '--json',
                          '--no-bandwidth'] + common, capture_output=True, text=True, check=True).stdout
    j = json.loads(out)
    return {'pp': j['pp']['tokens_per_s'], 'tg': j['tg']['tokens_per_s']}


engines = ['ref', 'weft'] if a.reference else ['weft']
print('| model | test | reference t/s | weft t/s | weft / reference |')
print('| --- | --- | ---: | ---: | ---: |')
for m in a.models:
    runs = {who: [] for who in engines}
    for i in range(a.rounds):
        for who in (engines if i % 2 == 0 else engines[::-1]):
            print('running %s on %s (round %d)' % (who, os.path.basename(m), i + 1), file=sys.stderr)
            runs[who].append(reference(m) if who == 'ref' else weft(m))
    for test, n in (('pp', a.n_prompt), ('tg', a.n_gen)):
        w = statistics.mean(x[test] for x in runs['weft'])
        if a.reference:
            r = statistics.mean(x[test] for x in runs['ref'])
            print('| %s | %s%d | %.2f | %.2f | %.2f |' % (os.path.basename(m), test, n, r, w, w / r), flush=True)
        else:
            print('| %s | %s%d | - | %.2f | - |' % (os.path.basename(m), test, n, w), flush=True)
