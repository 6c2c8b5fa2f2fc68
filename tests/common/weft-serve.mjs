// tests/common/weft-serve.mjs — what the npm client tests (tests/openai, tests/clients) share: `weft
// serve` processes started on free ports and stopped, their logs, one watchdog for the whole run, and
// a list of checks run one after another with a time limit each.

import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The servers of one test script. `name` prefixes its messages; after `watchdogMs` the whole run
// fails (the servers are killed, their logs printed). The servers are killed when the script exits
// or is interrupted.
export function serverPool(binary, name, watchdogMs) {
  const servers = []; // { label, proc, url, log }
  const killAll = (signal) => {
    for (const s of servers)
      if (s.proc.exitCode === null && s.proc.signalCode === null) s.proc.kill(signal);
  };
  // WEFT_TEST_LOGS=1: the servers' whole logs, also when every check passed
  const dumpLogs = () => {
    const all = !!process.env.WEFT_TEST_LOGS;
    for (const s of servers)
      console.error(
        `--- stderr of ${s.label}${all ? '' : ' (last lines)'} ---\n${all ? s.log : s.log.split('\n').slice(-40).join('\n')}`,
      );
  };
  process.on('exit', () => killAll('SIGKILL'));
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'])
    process.on(sig, () => {
      console.error(`${name}: ${sig}, stopping the servers`);
      killAll('SIGKILL');
      process.exit(1);
    });
  setTimeout(() => {
    console.error(`${name}: FAIL: the whole run took over ${watchdogMs / 1000} s`);
    dumpLogs();
    killAll('SIGKILL');
    process.exit(1);
  }, watchdogMs).unref();

  // Starts `weft serve --port 0 ARGS`, waits for its "listening on" line and a 200 from /health.
  async function start(label, args) {
    const proc = spawn(binary, ['serve', '--port', '0', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    const s = { label, proc, url: null, log: '' };
    servers.push(s);
    proc.stderr.setEncoding('utf8');
    s.url = await new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`${label}: no "listening on" line within 15 s; stderr:\n${s.log}`)),
        15_000,
      );
      proc.stderr.on('data', (d) => {
        s.log += d;
        const m = s.log.match(/weft serve: listening on (http:\/\/[^\s]+)/);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
      proc.on('error', (e) => {
        clearTimeout(timer);
        reject(new Error(`${label}: cannot start ${binary}: ${e.message}`));
      });
      proc.on('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`${label}: exited (${code ?? signal}) before listening; stderr:\n${s.log}`));
      });
    });
    const deadline = Date.now() + 15_000;
    let last = '';
    for (;;) {
      try {
        const r = await fetch(`${s.url}/health`);
        const body = await r.json();
        if (r.status === 200 && body.status === 'ok') break;
        last = `${r.status} ${JSON.stringify(body)}`;
      } catch (e) {
        last = String(e);
      }
      if (Date.now() > deadline) throw new Error(`${label}: /health not ok within 15 s (last: ${last})`);
      await sleep(50);
    }
    return s;
  }

  // SIGTERM, then the exit status; SIGKILL after 5 s.
  async function stop(s) {
    if (s.proc.exitCode !== null || s.proc.signalCode !== null)
      return { code: s.proc.exitCode, signal: s.proc.signalCode, killed: false };
    const exited = new Promise((r) => s.proc.once('exit', (code, signal) => r({ code, signal })));
    s.proc.kill('SIGTERM');
    const res = await Promise.race([exited, sleep(5000).then(() => null)]);
    if (res) return { ...res, killed: false };
    s.proc.kill('SIGKILL');
    return { ...(await exited), killed: true };
  }

  return { servers, start, stop, dumpLogs };
}

// The version of an installed npm package, as the script at `scriptUrl` resolves it.
export function packageVersion(scriptUrl, name) {
  try {
    let dir = path.dirname(createRequire(scriptUrl).resolve(name));
    while (!existsSync(path.join(dir, 'package.json')) && dir !== path.dirname(dir)) dir = path.dirname(dir);
    return JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')).version;
  } catch {
    return '(version unknown)';
  }
}

function withTimeout(promise, ms, name) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${name}: timed out after ${ms / 1000} s`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

// Runs `setup` (which starts the servers), then each check in turn, printing ok or FAIL with the
// reason; then stops every server (SIGTERM must end each with status 0) and exits 1 when anything
// failed, 0 otherwise.
export async function runChecks(pool, name, checks, checkTimeoutMs, setup) {
  const failures = [];
  const t0 = Date.now();
  try {
    await setup();
    for (const { name: what, fn } of checks) {
      const t = Date.now();
      try {
        await withTimeout(fn(), checkTimeoutMs, what);
        console.log(`ok    ${what} (${Date.now() - t} ms)`);
      } catch (e) {
        failures.push(what);
        console.log(`FAIL  ${what}\n      ${String(e?.stack ?? e).split('\n').slice(0, 12).join('\n      ')}`);
      }
    }
  } catch (e) {
    failures.push('starting the servers');
    console.log(`FAIL  starting the servers: ${e?.message ?? e}`);
  }
  for (const s of pool.servers) {
    const r = await pool.stop(s);
    if (r.killed || r.code !== 0) {
      failures.push(`${s.label} stops on SIGTERM`);
      console.log(
        `FAIL  ${s.label} stops on SIGTERM: ${r.killed ? 'still running after 5 s, killed' : `exit ${r.code ?? r.signal}`}`,
      );
    }
  }
  if (failures.length || process.env.WEFT_TEST_LOGS) pool.dumpLogs();
  console.log(
    failures.length
      ? `${name}: ${failures.length} FAILED (${failures.join('; ')}) in ${Date.now() - t0} ms`
      : `${name}: all ${checks.length} checks passed in ${Date.now() - t0} ms`,
  );
  process.exit(failures.length ? 1 : 0);
}
