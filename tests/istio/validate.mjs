// Validates Istio objects against Istio's CRD schemas (@kubernetes-models/istio).
// stdin: a JSON array of objects; stdout: a JSON array, one entry per object:
// {"kind", "name", "errors": [..]} (errors empty when the object is valid).
// An object whose apiVersion/kind the package has no model for is an error too.
import * as istio from "@kubernetes-models/istio";

const input = JSON.parse(await new Promise((resolve, reject) => {
  let text = "";
  process.stdin.setEncoding("utf8");
  process.stdin.on("data", (chunk) => { text += chunk; });
  process.stdin.on("end", () => resolve(text));
  process.stdin.on("error", reject);
}));

const models = new Map();
for (const group of Object.values(istio)) {
  for (const version of Object.values(group)) {
    for (const model of Object.values(version)) {
      if (model && model.apiVersion && model.kind) models.set(`${model.apiVersion}/${model.kind}`, model);
    }
  }
}

const results = input.map((obj) => {
  const name = obj?.metadata?.name;
  const Model = models.get(`${obj.apiVersion}/${obj.kind}`);
  if (!Model) return { kind: obj.kind, name, errors: [`no Istio schema for ${obj.apiVersion} ${obj.kind}`] };
  try {
    new Model(obj).validate();
    return { kind: obj.kind, name, errors: [] };
  } catch (err) {
    const details = (err.errors || []).map((e) => `${e.instancePath || "/"} ${e.message}${e.params ? " " + JSON.stringify(e.params) : ""}`);
    return { kind: obj.kind, name, errors: details.length ? details : [String(err.message || err)] };
  }
});
process.stdout.write(JSON.stringify(results));
