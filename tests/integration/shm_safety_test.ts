/**
 * System shared memory cannot reach past /dev/shm: symbolic links and anything but a regular file are refused,
 * the server's own objects cannot be registered, and the Python stubs' objects are readable by their owner only.
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { SystemSharedMemory } from "../../server/shm/system_shm.ts";
import { pythonPath, startTestServer } from "../helpers.ts";
import { inferJson } from "./_http.ts";

const PYTHON_MODELS = fileURLToPath(new URL("../fixtures/python_models", import.meta.url));

Deno.test("registering a symbolic link, a FIFO or a folder as a region is refused; the link's target is untouched", async () => {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-shm-" });
  const outside = await Deno.makeTempDir({ prefix: "dinfer-shm-outside-" });
  const shm = new SystemSharedMemory(true, dir);
  try {
    const secret = `${outside}/secret`;
    await Deno.writeTextFile(secret, "top secret");
    await Deno.symlink(secret, `${dir}/link`);
    await assert.rejects(shm.register("r", "/link", 0, 4), {
      message:
        "Cannot register shared memory region 'r': cannot open shared-memory object '/link': it is a symbolic link",
    });
    // A dangling link is refused the same way.
    await Deno.symlink(`${outside}/nothing`, `${dir}/dangling`);
    await assert.rejects(shm.register("r", "dangling", 0, 0), {
      message:
        "Cannot register shared memory region 'r': cannot open shared-memory object 'dangling': it is a symbolic link",
    });
    const fifo = await new Deno.Command("mkfifo", { args: [`${dir}/fifo`] }).output();
    assert.equal(fifo.code, 0);
    await assert.rejects(shm.register("r", "fifo", 0, 0), {
      message:
        "Cannot register shared memory region 'r': cannot open shared-memory object 'fifo': it is not a regular file",
    });
    await Deno.mkdir(`${dir}/folder`);
    await assert.rejects(shm.register("r", "folder", 0, 0), {
      message:
        "Cannot register shared memory region 'r': cannot open shared-memory object 'folder': it is not a regular file",
    });
    await assert.rejects(shm.register("r", "missing", 0, 0), {
      message:
        "Cannot register shared memory region 'r': cannot open shared-memory object 'missing': no such object",
    });
    assert.deepEqual(shm.status(""), []);
    assert.equal(await Deno.readTextFile(secret), "top secret");

    // A regular file registers as before.
    await Deno.writeFile(`${dir}/plain`, new Uint8Array(16));
    await shm.register("ok", "/plain", 0, 16);
    assert.deepEqual(shm.status(""), [{ name: "ok", key: "/plain", offset: 0, byte_size: 16 }]);
  } finally {
    shm.close();
    await Deno.remove(dir, { recursive: true });
    await Deno.remove(outside, { recursive: true });
  }
});

Deno.test("the server's own shared-memory objects cannot be registered, present or not", async () => {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-shm-" });
  const shm = new SystemSharedMemory(true, dir);
  try {
    await Deno.writeFile(`${dir}/dinfer-py-1-abc`, new Uint8Array(64));
    for (const key of ["/dinfer-py-1-abc", "dinfer-py-1-abc", "/dinfer-resp-7-1-2", "/dinfer-blsr-1"]) {
      await assert.rejects(shm.register("r", key, 0, 8), {
        message:
          `Cannot register shared memory region 'r': key '${key}' names one of the server's own shared-memory objects`,
      });
    }
    assert.deepEqual(shm.status(""), []);
  } finally {
    shm.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a Python stub's shared-memory object is readable and writable by its owner only", async () => {
  await using s = await startTestServer([
    `--model-repository=${PYTHON_MODELS}`,
    `--backend-config=python,python-executable=${pythonPath()}`,
    "--model-control-mode=explicit",
    "--load-model=crash_py",
  ]);
  const r = await inferJson(s.url, "crash_py", {
    inputs: [{ name: "ACTION", datatype: "INT32", shape: [1], data: [0] }],
  });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  // Test files running beside this one in the same process may have stubs of their own: every object of this
  // process must be owner-only, this stub's among them.
  const mine = [...Deno.readDirSync("/dev/shm")].filter((e) => e.name.startsWith(`dinfer-py-${Deno.pid}-`));
  const modes = mine.flatMap((e) => {
    try {
      return [(Deno.statSync(`/dev/shm/${e.name}`).mode! & 0o777).toString(8)];
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return []; // another file's stub, gone meanwhile
      throw err;
    }
  });
  assert.ok(modes.length >= 1, "the stub's object exists");
  assert.deepEqual(modes, modes.map(() => "600"));
});

Deno.test("a request to a stub killed from outside says that the stub died", async () => {
  await using s = await startTestServer([
    `--model-repository=${PYTHON_MODELS}`,
    `--backend-config=python,python-executable=${pythonPath()}`,
    "--model-control-mode=explicit",
    "--load-model=crash_py",
  ]);
  const action = (n: number) =>
    inferJson(s.url, "crash_py", { inputs: [{ name: "ACTION", datatype: "INT32", shape: [1], data: [n] }] });
  for (let i = 0; i < 5; i++) {
    let ok = await action(0);
    // The previous round's stub may still be starting again.
    for (let wait = 0; ok.status !== 200 && wait < 100; wait++) {
      await new Promise((r) => setTimeout(r, 50));
      ok = await action(0);
    }
    assert.equal(ok.status, 200, JSON.stringify(ok.json));
    const pid = (ok.json!.outputs as { data: number[] }[])[0]!.data[0]!;
    Deno.kill(pid, "SIGKILL");
    const r = await action(0);
    if (r.status === 200) continue; // the server saw the exit and started a new stub first
    assert.equal(r.status, 500);
    const error = String(r.json?.error);
    assert.ok(
      [
        "Cannot run 'crash_py' instance 'crash_py_0': the Python stub has died",
        "Cannot run 'crash_py' instance 'crash_py_0': the Python stub was killed by SIGKILL",
      ].includes(error),
      error,
    );
  }
});

Deno.test("two registrations of one name at once: one succeeds, the other is refused, and no file stays open", async () => {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-shm-" });
  const shm = new SystemSharedMemory(true, dir);
  try {
    await Deno.writeFile(`${dir}/obj`, new Uint8Array(64));
    // The descriptors of this process open on the object (other tests' descriptors come and go meanwhile).
    const fds = () =>
      [...Deno.readDirSync("/proc/self/fd")].filter((e) => {
        try {
          return Deno.readLinkSync(`/proc/self/fd/${e.name}`) === `${dir}/obj`;
        } catch {
          return false;
        }
      }).length;
    const before = fds();
    assert.equal(before, 0);
    const outcomes = await Promise.allSettled([
      shm.register("r", "/obj", 0, 8),
      shm.register("r", "/obj", 0, 8),
    ]);
    assert.deepEqual(outcomes.map((o) => o.status).sort(), ["fulfilled", "rejected"]);
    const refused = outcomes.find((o) => o.status === "rejected") as PromiseRejectedResult;
    assert.equal(refused.reason.code, "ALREADY_EXISTS");
    assert.equal(fds(), before + 1);
    shm.unregister("r");
    assert.equal(fds(), before);
    // A failed registration gives its name back.
    await assert.rejects(shm.register("r", "/missing", 0, 8));
    await shm.register("r", "/obj", 0, 8);
  } finally {
    shm.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("at most 1024 regions are registered at once, so that a client cannot take every file descriptor", async () => {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-shm-" });
  const shm = new SystemSharedMemory(true, dir);
  try {
    await Deno.writeFile(`${dir}/obj`, new Uint8Array(8));
    for (let i = 0; i < 1024; i++) await shm.register(`r${i}`, "/obj", 0, 8);
    await assert.rejects(shm.register("one-more", "/obj", 0, 8), {
      message:
        "Cannot register shared memory region 'one-more': 1024 shared memory regions are registered, the most there may be",
    });
    shm.unregister("r0");
    await shm.register("one-more", "/obj", 0, 8);
  } finally {
    shm.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("an input whose shared_memory_byte_size does not fit its shape is not read from the region", async () => {
  // Validation refuses it; reading it first let a request have the server copy a whole large region.
  const dir = await Deno.makeTempDir({ prefix: "dinfer-shm-" });
  const shm = new SystemSharedMemory(true, dir);
  try {
    await Deno.writeFile(`${dir}/obj`, new Uint8Array(64).fill(7));
    await shm.register("r", "/obj", 0, 64);
    const fits = shm.readTensor(
      { region: "r", offset: 0, byteSize: 16 },
      "FP32",
      [4],
      "input 'X'",
    ) as Uint8Array;
    assert.deepEqual([...fits], Array(16).fill(7));
    const wrong = shm.readTensor(
      { region: "r", offset: 0, byteSize: 64 },
      "FP32",
      [4],
      "input 'X'",
    ) as Uint8Array;
    assert.equal(wrong.byteLength, 64); // the size validation words its error with
    assert.deepEqual([...wrong], Array(64).fill(0), "nothing was read");
  } finally {
    shm.close();
    await Deno.remove(dir, { recursive: true });
  }
});
