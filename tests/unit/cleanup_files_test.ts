/**
 * The sweep of the server's files named with a process id, on folders of the test's own (a start-up in another
 * test sweeps /dev/shm and the shared temporary folder at any time).
 * @module
 */

import assert from "node:assert/strict";
import { removeOwnFiles, removeStaleFiles } from "../../server/cleanup.ts";
import { deadPid } from "../helpers.ts";

/** Two folders standing for /dev/shm and the temporary folder, with files of a dead process, this one and others. */
async function layout(dead: number): Promise<{ shm: string; tmp: string }> {
  const shm = await Deno.makeTempDir({ prefix: "cleanup-shm-" });
  const tmp = await Deno.makeTempDir({ prefix: "cleanup-tmp-" });
  const me = Deno.pid;
  for (const kind of ["py", "resp", "bls", "blsr"]) {
    await Deno.writeFile(`${shm}/dinfer-${kind}-${dead}-1`, new Uint8Array(8));
    await Deno.writeFile(`${shm}/dinfer-${kind}-${me}-1`, new Uint8Array(8));
  }
  for (const kind of ["upload", "py", "cloud"]) {
    await Deno.mkdir(`${tmp}/dinfer-${kind}-${dead}-x/m/1`, { recursive: true });
    await Deno.writeTextFile(`${tmp}/dinfer-${kind}-${dead}-x/m/1/model.py`, "");
    await Deno.mkdir(`${tmp}/dinfer-${kind}-${me}-x`);
  }
  // Not the server's names: a kind it does not make, a kind of the other folder, no process id.
  await Deno.writeFile(`${shm}/dinfer-upload-${dead}-1`, new Uint8Array(8));
  await Deno.writeFile(`${shm}/other-py-${dead}-1`, new Uint8Array(8));
  await Deno.mkdir(`${tmp}/dinfer-resp-${dead}-x`);
  await Deno.mkdir(`${tmp}/dinfer-py-x`);
  return { shm, tmp };
}

function names(dir: string): string[] {
  return [...Deno.readDirSync(dir)].map((e) => e.name).sort();
}

Deno.test("removeStaleFiles removes the files of processes no longer running, and only those", async () => {
  const dead = await deadPid();
  const { shm, tmp } = await layout(dead);
  const me = Deno.pid;
  try {
    const removed = removeStaleFiles({ shm, tmp }).sort();
    assert.deepEqual(
      removed,
      [
        ...["bls", "blsr", "py", "resp"].map((k) => `${shm}/dinfer-${k}-${dead}-1`),
        ...["cloud", "py", "upload"].map((k) => `${tmp}/dinfer-${k}-${dead}-x`),
      ].sort(),
    );
    assert.deepEqual(
      names(shm),
      [
        `dinfer-bls-${me}-1`,
        `dinfer-blsr-${me}-1`,
        `dinfer-py-${me}-1`,
        `dinfer-resp-${me}-1`,
        `dinfer-upload-${dead}-1`,
        `other-py-${dead}-1`,
      ].sort(),
    );
    assert.deepEqual(
      names(tmp),
      [
        `dinfer-cloud-${me}-x`,
        `dinfer-py-${me}-x`,
        `dinfer-py-x`,
        `dinfer-resp-${dead}-x`,
        `dinfer-upload-${me}-x`,
      ].sort(),
    );
    // Nothing left to remove the second time.
    assert.deepEqual(removeStaleFiles({ shm, tmp }), []);
  } finally {
    await Deno.remove(shm, { recursive: true });
    await Deno.remove(tmp, { recursive: true });
  }
});

Deno.test("removeOwnFiles removes this process's files, and only those", async () => {
  const dead = await deadPid();
  const { shm, tmp } = await layout(dead);
  const me = Deno.pid;
  try {
    assert.deepEqual(
      removeOwnFiles({ shm, tmp }).sort(),
      [
        ...["bls", "blsr", "py", "resp"].map((k) => `${shm}/dinfer-${k}-${me}-1`),
        ...["cloud", "py", "upload"].map((k) => `${tmp}/dinfer-${k}-${me}-x`),
      ].sort(),
    );
    assert.equal(names(shm).filter((n) => n.includes(`-${me}-`)).length, 0);
    assert.equal(names(tmp).filter((n) => n.includes(`-${me}-`)).length, 0);
    assert.equal(names(shm).length, 6);
    assert.equal(names(tmp).length, 5);
  } finally {
    await Deno.remove(shm, { recursive: true });
    await Deno.remove(tmp, { recursive: true });
  }
});
