#!/usr/bin/env node
// A clusterfed client in JavaScript, written from docs/protocol.md alone:
// Node's standard library and @msgpack/msgpack, nothing else. It connects to
// `clusterfed serve … --external N`, authenticates with its token, asks for
// its samples, and trains softmax regression (the `mlp` model with
// `hidden = []`: W, classes × features, row-major, then b) with plain SGD.
//
//   node client.js --connect 127.0.0.1:PORT --id N --token TOKEN
//
// It answers train, evaluate, probe and describe (class histogram) tasks
// and the shutdown; anything else gets an `error` reply, never a crash.
"use strict";

const crypto = require("node:crypto");
const net = require("node:net");
const { encode, decode, ExtensionCodec } = require("@msgpack/msgpack");

const PROTOCOL_VERSION = 2;
const TENSOR_EXT = 1;
const MAX_FRAME = 256 * 1024 * 1024;
const DTYPES = ["float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool"];
const SIZES = [4, 8, 2, 8, 4, 2, 1, 1, 1];

// -- tensors: msgpack ext 1 = dtype code, ndim, ndim × uint64 LE, values LE --

class Tensor {
  constructor(dtype, shape, values) {
    this.dtype = dtype; // "float32" or "int64" when sent
    this.shape = shape;
    this.values = values; // a plain array or typed array of numbers
  }
}

const codec = new ExtensionCodec();
codec.register({
  type: TENSOR_EXT,
  encode(value) {
    if (!(value instanceof Tensor)) return null;
    const code = DTYPES.indexOf(value.dtype);
    const size = SIZES[code];
    const out = new DataView(new ArrayBuffer(2 + 8 * value.shape.length + size * value.values.length));
    out.setUint8(0, code);
    out.setUint8(1, value.shape.length);
    value.shape.forEach((d, i) => out.setBigUint64(2 + 8 * i, BigInt(d), true));
    let at = 2 + 8 * value.shape.length;
    for (const v of value.values) {
      if (value.dtype === "float32") out.setFloat32(at, v, true);
      else if (value.dtype === "int64") out.setBigInt64(at, BigInt(v), true);
      else throw new Error(`cannot send dtype ${value.dtype}`);
      at += size;
    }
    return new Uint8Array(out.buffer);
  },
  decode(data) {
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    const code = view.getUint8(0);
    const ndim = view.getUint8(1);
    if (code >= DTYPES.length || ndim > 8) throw new Error(`bad tensor header ${code}/${ndim}`);
    const shape = [];
    for (let i = 0; i < ndim; i++) shape.push(Number(view.getBigUint64(2 + 8 * i, true)));
    const count = shape.reduce((a, b) => a * b, 1);
    const start = 2 + 8 * ndim;
    if (data.byteLength !== start + count * SIZES[code]) throw new Error("tensor size does not match its shape");
    const values = new Float64Array(count);
    for (let i = 0, at = start; i < count; i++, at += SIZES[code]) {
      const dtype = DTYPES[code];
      if (dtype === "float32") values[i] = view.getFloat32(at, true);
      else if (dtype === "float64") values[i] = view.getFloat64(at, true);
      else if (dtype === "int64") values[i] = Number(view.getBigInt64(at, true));
      else if (dtype === "int32") values[i] = view.getInt32(at, true);
      else throw new Error(`unsupported dtype ${dtype}`);
    }
    return new Tensor(DTYPES[code], shape, values);
  },
});

const pack = (value) => encode(value, { extensionCodec: codec });
const unpack = (bytes) => decode(bytes, { extensionCodec: codec });

// -- softmax regression ------------------------------------------------------

function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

class Model {
  // Flat weights: W (classes × features, row-major), then b (classes).
  constructor(flat, features, classes) {
    if (flat.length !== classes * features + classes) {
      throw new Error(`a model of ${flat.length} weights is no softmax regression of ${features} × ${classes}`);
    }
    this.w = Float64Array.from(flat);
    this.features = features;
    this.classes = classes;
  }

  probabilities(x, row) {
    const { features: d, classes: k, w } = this;
    const logits = new Float64Array(k);
    for (let c = 0; c < k; c++) {
      let s = w[k * d + c];
      for (let j = 0; j < d; j++) s += w[c * d + j] * x[row * d + j];
      logits[c] = s;
    }
    const top = Math.max(...logits);
    let total = 0;
    for (let c = 0; c < k; c++) total += (logits[c] = Math.exp(logits[c] - top));
    for (let c = 0; c < k; c++) logits[c] /= total;
    return logits;
  }

  score(data) {
    const n = data.y.length;
    let loss = 0;
    let right = 0;
    for (let i = 0; i < n; i++) {
      const p = this.probabilities(data.x, i);
      loss -= Math.log(p[data.y[i]] + 1e-12);
      let best = 0;
      for (let c = 1; c < p.length; c++) if (p[c] > p[best]) best = c;
      if (best === data.y[i]) right += 1;
    }
    return { loss: loss / n, accuracy: right / n };
  }
}

function train(start, data, config, rng) {
  const model = new Model(start, data.features, data.classes);
  const { features: d, classes: k } = model;
  const w = model.w;
  const w0 = Float64Array.from(w);
  const velocity = new Float64Array(w.length);
  const grad = new Float64Array(w.length);
  const n = data.y.length;
  let total = 0;
  let seen = 0;
  for (let epoch = 0; epoch < config.epochs; epoch++) {
    const order = Array.from({ length: n }, (_, i) => i);
    for (let i = n - 1; i > 0; i--) {
      const j = Math.floor(rng() * (i + 1));
      [order[i], order[j]] = [order[j], order[i]];
    }
    for (let first = 0; first < n; first += config.batch_size) {
      const batch = order.slice(first, first + config.batch_size);
      grad.fill(0);
      for (const row of batch) {
        const p = model.probabilities(data.x, row);
        total -= Math.log(p[data.y[row]] + 1e-12);
        p[data.y[row]] -= 1;
        for (let c = 0; c < k; c++) {
          for (let j = 0; j < d; j++) grad[c * d + j] += p[c] * data.x[row * d + j];
          grad[k * d + c] += p[c];
        }
      }
      seen += batch.length;
      for (let i = 0; i < w.length; i++) {
        const g = grad[i] / batch.length + config.weight_decay * w[i] + config.mu * (w[i] - w0[i]);
        velocity[i] = config.momentum * velocity[i] + g;
        w[i] -= config.lr * velocity[i];
      }
    }
  }
  const delta = Array.from(w, (v, i) => Math.fround(v) - Math.fround(start[i]));
  return { delta, loss: total / seen, seen };
}

// -- the client: one reply per request ---------------------------------------

class Client {
  constructor(id, data) {
    this.id = id;
    this.address = `client/${id}`;
    this.useData(data);
    this.rng = mulberry32(id + 1);
  }

  useData(data) {
    const [n, features] = data.x_train.shape;
    this.classes = data.n_classes;
    const samples = (x, y) => ({ x: x.values, y: Array.from(y.values), features, classes: data.n_classes });
    this.train = samples(data.x_train, data.y_train);
    this.test = samples(data.x_test, data.y_test);
    this.nTrain = n;
  }

  envelope(payload, msgId, round, request) {
    return {
      protocol_version: PROTOCOL_VERSION,
      msg_id: msgId,
      sender: this.address,
      recipient: request ? request.sender : "server",
      round,
      in_reply_to: request ? request.msg_id : null,
      payload,
    };
  }

  joinRequest() {
    const payload = { kind: "join_request", client_id: this.id, n_train: this.nTrain, n_test: this.test.y.length };
    return pack(this.envelope(payload, `${this.address}:join`, -1, null));
  }

  leaveNotice(reason) {
    const payload = { kind: "leave", client_id: this.id, reason: String(reason).slice(0, 1024) };
    return pack(this.envelope(payload, `${this.address}:leave`, -1, null));
  }

  handle(bytes) {
    let request;
    try {
      request = unpack(bytes);
      if (request === null || typeof request !== "object" || typeof request.payload !== "object") {
        throw new Error("expected an envelope map");
      }
      if (request.protocol_version !== PROTOCOL_VERSION) {
        throw new Error(`protocol_version: ${request.protocol_version} is not supported (this side speaks ${PROTOCOL_VERSION})`);
      }
    } catch (error) {
      const payload = { kind: "error", code: "bad_message", message: String(error.message).slice(0, 1024) };
      return pack(this.envelope(payload, `${this.address}:error`, -1, null));
    }
    let reply;
    try {
      reply = this.serve(request.payload);
    } catch (error) {
      reply = { kind: "error", code: "refused", message: String(error.message).slice(0, 1024) };
    }
    const msgId = `${this.address}:re:${request.msg_id}`.slice(0, 128);
    return pack(this.envelope(reply, msgId, request.round, request));
  }

  serve(task) {
    switch (task.kind) {
      case "train_task":
        return this.trainTask(task);
      case "evaluate_task": {
        if (task.others) throw new Error("mixture evaluation is not supported");
        const { accuracy, loss } = this.model(task.model.weights).score(this.test);
        return { kind: "evaluate_reply", cluster: task.model.cluster, accuracy, loss, n_samples: this.test.y.length };
      }
      case "probe_task":
        return {
          kind: "probe_reply",
          scores: task.models.map((m) => ({ owner: m.owner, ...this.model(m.weights).score(this.test) })),
          n_samples: this.test.y.length,
        };
      case "describe_task": {
        if (task.want !== "class_histogram") throw new Error(`cannot describe ${task.want}`);
        const counts = new Array(this.classes).fill(0);
        for (const y of this.train.y) counts[y] += 1;
        return { kind: "class_histogram", client_id: this.id, counts };
      }
      case "shutdown":
        return { kind: "shutdown", reason: "acknowledged" };
      default:
        return { kind: "error", code: "unexpected", message: `a client does not serve ${JSON.stringify(task.kind)}` };
    }
  }

  model(weights) {
    return new Model(weights.values, this.train.features, this.classes);
  }

  trainTask(task) {
    if (task.mixture || (task.identity && task.identity.name !== "min_loss" && task.models.length > 1)) {
      throw new Error(`identity rule ${task.identity && task.identity.name} is not supported`);
    }
    let chosen = task.models[0];
    let seen = 0;
    if (task.models.length > 1) {
      // IFCA's rule: the model of the lowest loss on the training samples.
      const losses = task.models.map((m) => this.model(m.weights).score(this.train).loss);
      chosen = task.models[losses.indexOf(Math.min(...losses))];
      seen = this.nTrain * task.models.length;
    }
    const result = train(chosen.weights.values, this.train, task.config, this.rng);
    if (!Number.isFinite(result.loss)) throw new Error("training diverged");
    return {
      kind: "update_reply",
      cluster: chosen.cluster,
      delta: new Tensor("float32", [result.delta.length], result.delta),
      n_samples: this.nTrain,
      loss: result.loss,
      samples_seen: seen + result.seen,
      epsilon: null,
    };
  }
}

// -- the transport: 4-byte LE length frames, HMAC-SHA256 challenge ------------

class Frames {
  constructor(socket) {
    this.socket = socket;
    this.buffer = Buffer.alloc(0);
    this.waiting = [];
    this.ended = false;
    this.failure = null;
    socket.on("data", (chunk) => {
      this.buffer = Buffer.concat([this.buffer, chunk]);
      this.pump();
    });
    socket.on("close", () => {
      this.ended = true;
      this.pump();
    });
    socket.on("error", () => {});
  }

  pump() {
    while (this.waiting.length) {
      if (this.buffer.length >= 4) {
        const size = this.buffer.readUInt32LE(0);
        if (size > MAX_FRAME) {
          // Refused on its length alone: nothing is read or allocated.
          this.failure = `a frame of ${size} bytes is over the limit of ${MAX_FRAME}`;
          this.socket.destroy();
          this.buffer = Buffer.alloc(0);
          this.waiting.shift()(null);
          continue;
        }
        if (this.buffer.length >= 4 + size) {
          const body = this.buffer.subarray(4, 4 + size);
          this.buffer = this.buffer.subarray(4 + size);
          this.waiting.shift()(body);
          continue;
        }
      }
      if (!this.ended) return;
      this.waiting.shift()(null);
    }
  }

  next() {
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      this.pump();
    });
  }
}

function send(socket, body) {
  const prefix = Buffer.alloc(4);
  prefix.writeUInt32LE(body.length, 0);
  socket.write(Buffer.concat([prefix, Buffer.from(body.buffer, body.byteOffset, body.byteLength)]));
}

async function session(host, port, id, token, state) {
  const socket = net.createConnection({ host, port });
  await new Promise((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  const frames = new Frames(socket);
  const control = async () => {
    const body = await frames.next();
    if (body === null) throw new Error("the server closed the connection");
    return unpack(body);
  };
  send(socket, pack({ type: "hello", protocol_version: PROTOCOL_VERSION, client_id: id, want: ["data"] }));
  const challenge = await control();
  const id8 = Buffer.alloc(8);
  id8.writeBigUInt64LE(BigInt(id), 0);
  const mac = crypto
    .createHmac("sha256", Buffer.from(token, "utf8"))
    .update(Buffer.concat([Buffer.from("clusterfed-auth"), Buffer.from(challenge.nonce), id8]))
    .digest();
  send(socket, pack({ type: "auth", mac: new Uint8Array(mac) }));
  const answer = await control();
  if (answer.type !== "accepted") {
    socket.destroy();
    const error = new Error(`refused: ${answer.reason}`);
    error.refused = true;
    throw error;
  }
  if (state.client === null) state.client = new Client(id, answer.data);
  else state.client.useData(answer.data);
  const client = state.client;
  send(socket, client.joinRequest());
  for (;;) {
    const body = await frames.next();
    if (body === null) {
      if (frames.failure) console.error(`client ${id}: ${frames.failure}`);
      return state.done ? "shutdown" : null;
    }
    if (body.length > 5 && body[0] >= 0x80 && body[0] <= 0x8f && body.subarray(1, 6).toString("latin1") === "\xa4type") {
      const order = unpack(body);
      if (order.type === "update" && order.data) client.useData(order.data);
      if (order.type === "leave") {
        send(socket, client.leaveNotice(order.reason || ""));
        socket.end();
        return "left";
      }
      continue;
    }
    const reply = client.handle(body);
    send(socket, reply);
    try {
      const sent = unpack(body);
      if (sent.payload && sent.payload.kind === "shutdown") state.done = true;
    } catch (error) {
      // a malformed request was answered with an error reply
    }
  }
}

async function main(argv) {
  const option = (name) => {
    const at = argv.indexOf(name);
    if (at < 0 || at + 1 >= argv.length) throw new Error(`${name} is required`);
    return argv[at + 1];
  };
  const [host, port] = option("--connect").split(/:(?=[0-9]+$)/);
  const id = Number.parseInt(option("--id"), 10);
  const token = option("--token");
  const state = { client: null, done: false };
  let deadline = Date.now() + 30000;
  for (;;) {
    let ended = null;
    try {
      ended = await session(host || "127.0.0.1", Number(port), id, token, state);
    } catch (error) {
      if (error.refused) {
        console.error(`client ${id}: ${error.message}`);
        return 2;
      }
      if (Date.now() > deadline) {
        console.error(`client ${id}: ${error.message}`);
        return 1;
      }
    }
    if (ended !== null) {
      console.log(`client ${id}: ${ended}`);
      return 0;
    }
    if (state.client !== null) deadline = Date.now() + 30000;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).then((code) => process.exit(code));
}

module.exports = { Client, Model, Tensor, pack, unpack };
