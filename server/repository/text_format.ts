/**
 * A parser and printer for the protobuf text format (the syntax of Triton's `config.pbtxt`), driven by
 * protobufjs reflection. The parser returns a plain object ready for `type.fromObject(...)`; it writes only
 * what the text sets and fills no defaults.
 * @module
 */

import * as protobuf from "protobufjs";

/** Options of {@linkcode parseTextFormat}. */
export interface ParseTextFormatOptions {
  /** The file name shown in error messages (default `<input>`). */
  filename?: string;
}

/** A syntax or schema error in text-format input, with its 1-based position. */
export class TextFormatError extends Error {
  /** The file name given to the parser. */
  readonly filename: string;
  /** The 1-based line of the offending token. */
  readonly line: number;
  /** The 1-based column of the offending token. */
  readonly column: number;
  /** The reason alone, without file name and position. */
  readonly reason: string;

  /**
   * Creates an error.
   * @param filename the file being parsed
   * @param line 1-based line
   * @param column 1-based column
   * @param reason what is wrong at that position
   */
  constructor(filename: string, line: number, column: number, reason: string) {
    super(`Cannot parse '${filename}' at ${line}:${column}: ${reason}`);
    this.name = "TextFormatError";
    this.filename = filename;
    this.line = line;
    this.column = column;
    this.reason = reason;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Schema view: what the parser needs to know about each field, computed once per protobufjs type.

type IntType =
  | "int32"
  | "sint32"
  | "sfixed32"
  | "uint32"
  | "fixed32"
  | "int64"
  | "sint64"
  | "sfixed64"
  | "uint64"
  | "fixed64";

interface FieldInfo {
  readonly name: string;
  /** The protobuf type name: a scalar type, or the message / enum name. */
  readonly type: string;
  readonly kind: "message" | "enum" | "scalar";
  readonly repeated: boolean;
  readonly message?: protobuf.Type;
  readonly enumType?: protobuf.Enum;
  readonly map?: { readonly key: FieldInfo; readonly value: FieldInfo; readonly entry: Shape };
  readonly oneof?: string;
}

interface Shape {
  readonly fullName: string;
  readonly fields: ReadonlyMap<string, FieldInfo>;
  readonly oneofs: ReadonlySet<string>;
}

const INT_RANGES: Record<IntType, readonly [bigint, bigint]> = {
  int32: [-(2n ** 31n), 2n ** 31n - 1n],
  sint32: [-(2n ** 31n), 2n ** 31n - 1n],
  sfixed32: [-(2n ** 31n), 2n ** 31n - 1n],
  uint32: [0n, 2n ** 32n - 1n],
  fixed32: [0n, 2n ** 32n - 1n],
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  sint64: [-(2n ** 63n), 2n ** 63n - 1n],
  sfixed64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint64: [0n, 2n ** 64n - 1n],
  fixed64: [0n, 2n ** 64n - 1n],
};

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

function isIntType(type: string): type is IntType {
  return Object.hasOwn(INT_RANGES, type);
}

function trimDot(name: string): string {
  return name.startsWith(".") ? name.slice(1) : name;
}

function makeInfo(
  name: string,
  type: string,
  resolved: protobuf.ReflectionObject | null,
  repeated: boolean,
  oneof?: string,
): FieldInfo {
  const base = { name, repeated, ...(oneof === undefined ? {} : { oneof }) };
  if (resolved instanceof protobuf.Type) {
    return { ...base, type: trimDot(resolved.fullName), kind: "message", message: resolved };
  }
  if (resolved instanceof protobuf.Enum) {
    return { ...base, type: trimDot(resolved.fullName), kind: "enum", enumType: resolved };
  }
  return { ...base, type, kind: "scalar" };
}

const shapes = new WeakMap<protobuf.Type, Shape>();

function shapeOf(type: protobuf.Type): Shape {
  let shape = shapes.get(type);
  if (shape) return shape;
  const fields = new Map<string, FieldInfo>();
  for (const field of type.fieldsArray) {
    field.resolve();
    if (field instanceof protobuf.MapField) {
      const key = makeInfo("key", field.keyType, null, false);
      const value = makeInfo("value", field.type, field.resolvedType, false);
      fields.set(field.name, {
        name: field.name,
        type: `map<${field.keyType}, ${value.type}>`,
        kind: "message",
        repeated: true,
        map: {
          key,
          value,
          entry: {
            fullName: `the map entry of field '${field.name}'`,
            fields: new Map([["key", key], ["value", value]]),
            oneofs: new Set(),
          },
        },
      });
    } else {
      fields.set(
        field.name,
        makeInfo(field.name, field.type, field.resolvedType, field.repeated, field.partOf?.name),
      );
    }
  }
  shape = { fullName: trimDot(type.fullName), fields, oneofs: new Set(type.oneofsArray.map((o) => o.name)) };
  shapes.set(type, shape);
  return shape;
}

function setProp(obj: Record<string, unknown>, key: string, value: unknown): void {
  if (key === "__proto__") {
    Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
  } else {
    obj[key] = value;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Tokenizer.

type TokenKind = "ident" | "int" | "float" | "string" | "symbol" | "end";

interface Token {
  readonly kind: TokenKind;
  /** The source text (strings: with their quotes). */
  readonly text: string;
  readonly line: number;
  readonly column: number;
  /** For strings: the decoded bytes (null for other tokens, so that every token has one shape). */
  readonly bytes: number[] | null;
  /** For strings: whether every decoded byte is ASCII. */
  readonly ascii: boolean;
}

const ESCAPES: Record<string, number> = {
  n: 10,
  t: 9,
  r: 13,
  "\\": 92,
  "'": 39,
  '"': 34,
  "?": 63,
  a: 7,
  b: 8,
  f: 12,
  v: 11,
};

const HEX_INT = /^0[xX][0-9a-fA-F]+$/;
const OCT_INT = /^0[0-7]*$/;
const DEC_INT = /^[1-9][0-9]*$/;
const FLOAT = /^(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fF]?$/;

/** Whether `c` is one of the punctuation tokens `{ } [ ] < > : , ; -`. */
function isSymbol(c: number): boolean {
  switch (c) {
    case 123: // {
    case 125: // }
    case 91: // [
    case 93: // ]
    case 60: // <
    case 62: // >
    case 58: // :
    case 44: // ,
    case 59: // ;
    case 45: // -
      return true;
    default:
      return false;
  }
}

function isDigit(c: number): boolean {
  return c >= 48 && c <= 57;
}

function isIdentStart(c: number): boolean {
  return (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95;
}

function isIdentPart(c: number): boolean {
  return isIdentStart(c) || isDigit(c);
}

function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 65 && c <= 70) return c - 55;
  if (c >= 97 && c <= 102) return c - 87;
  return -1;
}

function pushUtf8(out: number[], cp: number): void {
  if (cp < 0x80) out.push(cp);
  else if (cp < 0x800) out.push(0xc0 | (cp >> 6), 0x80 | (cp & 63));
  else if (cp < 0x10000) out.push(0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 63), 0x80 | (cp & 63));
  else out.push(0xf0 | (cp >> 18), 0x80 | ((cp >> 12) & 63), 0x80 | ((cp >> 6) & 63), 0x80 | (cp & 63));
}

class Lexer {
  readonly #src: string;
  readonly #filename: string;
  #pos = 0;
  #line = 1;
  #lineStart = 0;
  #peeked: Token | undefined;

  constructor(src: string, filename: string) {
    this.#src = src;
    this.#filename = filename;
    if (src.charCodeAt(0) === 0xfeff) this.#pos = this.#lineStart = 1; // a byte order mark
  }

  fail(at: { line: number; column: number }, reason: string): never {
    throw new TextFormatError(this.#filename, at.line, at.column, reason);
  }

  peek(): Token {
    return this.#peeked ??= this.#scan();
  }

  next(): Token {
    const token = this.peek();
    this.#peeked = undefined;
    return token;
  }

  /** Consumes the next token when it is the given symbol. */
  take(symbol: string): boolean {
    const token = this.peek();
    if (token.kind === "symbol" && token.text === symbol) {
      this.#peeked = undefined;
      return true;
    }
    return false;
  }

  #skipSpaceAndComments(): void {
    const src = this.#src;
    while (this.#pos < src.length) {
      const c = src.charCodeAt(this.#pos);
      if (c === 10) {
        this.#pos++;
        this.#line++;
        this.#lineStart = this.#pos;
      } else if (c === 32 || c === 9 || c === 13 || c === 11 || c === 12) {
        this.#pos++;
      } else if (c === 35) {
        while (this.#pos < src.length && src.charCodeAt(this.#pos) !== 10) this.#pos++;
      } else {
        return;
      }
    }
  }

  #scan(): Token {
    this.#skipSpaceAndComments();
    const src = this.#src;
    const start = this.#pos;
    const line = this.#line;
    const column = start - this.#lineStart + 1;
    if (start >= src.length) return { kind: "end", text: "", line, column, bytes: null, ascii: true };
    const c = src.charCodeAt(start);
    if (isIdentStart(c)) {
      let end = start + 1;
      while (end < src.length && isIdentPart(src.charCodeAt(end))) end++;
      this.#pos = end;
      return { kind: "ident", text: src.slice(start, end), line, column, bytes: null, ascii: true };
    }
    if (isDigit(c) || (c === 46 && isDigit(src.charCodeAt(start + 1)))) {
      return this.#scanNumber(start, line, column);
    }
    if (c === 34 || c === 39) return this.#scanString(start, line, column);
    if (isSymbol(c)) {
      const ch = src[start] ?? "";
      this.#pos = start + 1;
      return { kind: "symbol", text: ch, line, column, bytes: null, ascii: true };
    }
    const cp = src.codePointAt(start) ?? c;
    const shown = cp < 32 || cp === 127 ? `\\x${cp.toString(16).padStart(2, "0")}` : String.fromCodePoint(cp);
    return this.fail({ line, column }, `unexpected character '${shown}'`);
  }

  #scanNumber(start: number, line: number, column: number): Token {
    const src = this.#src;
    const hex = src.charCodeAt(start) === 48 && (src[start + 1] === "x" || src[start + 1] === "X");
    let end = start;
    while (end < src.length) {
      const c = src.charCodeAt(end);
      if (isIdentPart(c) || c === 46) {
        end++;
      } else if ((c === 43 || c === 45) && !hex && (src[end - 1] === "e" || src[end - 1] === "E")) {
        end++;
      } else {
        break;
      }
    }
    this.#pos = end;
    const text = src.slice(start, end);
    if (DEC_INT.test(text) || OCT_INT.test(text) || HEX_INT.test(text)) {
      return { kind: "int", text, line, column, bytes: null, ascii: true };
    }
    if (FLOAT.test(text)) return { kind: "float", text, line, column, bytes: null, ascii: true };
    return this.fail({ line, column }, `invalid number '${text}'`);
  }

  #scanString(start: number, line: number, column: number): Token {
    const src = this.#src;
    const quote = src.charCodeAt(start);
    const bytes: number[] = [];
    let ascii = true;
    let i = start + 1;
    for (;;) {
      if (i >= src.length || src.charCodeAt(i) === 10) {
        return this.fail({ line, column }, "unterminated string");
      }
      const c = src.charCodeAt(i);
      if (c === quote) {
        i++;
        break;
      }
      if (c !== 92) {
        if (c < 0x80) {
          bytes.push(c);
          i++;
        } else {
          const cp = src.codePointAt(i) ?? c;
          pushUtf8(bytes, cp);
          ascii = false;
          i += cp > 0xffff ? 2 : 1;
        }
        continue;
      }
      // An escape sequence.
      const at = { line, column: i - this.#lineStart + 1 };
      const e = src[i + 1] ?? "";
      const simple = ESCAPES[e];
      if (simple !== undefined) {
        bytes.push(simple);
        i += 2;
      } else if (e >= "0" && e <= "7") {
        let j = i + 1;
        let value = 0;
        while (j < i + 4 && j < src.length && src.charCodeAt(j) >= 48 && src.charCodeAt(j) <= 55) {
          value = value * 8 + src.charCodeAt(j) - 48;
          j++;
        }
        if (value > 255) this.fail(at, `octal escape '${src.slice(i, j)}' is out of range (above \\377)`);
        bytes.push(value);
        if (value >= 0x80) ascii = false;
        i = j;
      } else if (e === "x" || e === "X") {
        let j = i + 2;
        let value = 0;
        while (j < i + 4 && j < src.length && hexValue(src.charCodeAt(j)) >= 0) {
          value = value * 16 + hexValue(src.charCodeAt(j));
          j++;
        }
        if (j === i + 2) this.fail(at, `invalid escape sequence '\\${e}': expected hex digits`);
        bytes.push(value);
        if (value >= 0x80) ascii = false;
        i = j;
      } else if (e === "u" || e === "U") {
        const digits = e === "u" ? 4 : 8;
        let cp = this.#hexDigits(i + 2, digits, at);
        let j = i + 2 + digits;
        if (cp >= 0xd800 && cp <= 0xdbff && src[j] === "\\" && src[j + 1] === "u") {
          const low = this.#hexDigits(j + 2, 4, { line, column: j - this.#lineStart + 1 });
          if (low >= 0xdc00 && low <= 0xdfff) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
            j += 6;
          }
        }
        if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
          this.fail(
            at,
            `invalid escape sequence '${src.slice(i, i + 2 + digits)}': not a Unicode code point`,
          );
        }
        pushUtf8(bytes, cp);
        if (cp >= 0x80) ascii = false;
        i = j;
      } else if (i + 1 >= src.length || e === "\n") {
        return this.fail({ line, column }, "unterminated string");
      } else {
        const shown = String.fromCodePoint(src.codePointAt(i + 1) ?? 0);
        this.fail(at, `invalid escape sequence '\\${shown}'`);
      }
    }
    this.#pos = i;
    return { kind: "string", text: src.slice(start, i), line, column, bytes, ascii };
  }

  #hexDigits(from: number, count: number, at: { line: number; column: number }): number {
    const src = this.#src;
    let value = 0;
    for (let k = 0; k < count; k++) {
      const d = hexValue(src.charCodeAt(from + k));
      if (d < 0) {
        const e = src[from - 1] ?? "";
        this.fail(at, `invalid escape sequence '\\${e}': expected ${count} hex digits`);
      }
      value = value * 16 + d;
    }
    return value;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Parser: recursive descent over the token stream.

function describe(token: Token): string {
  switch (token.kind) {
    case "end":
      return "end of input";
    case "string":
      return `string ${token.text.length > 40 ? `${token.text.slice(0, 37)}...` : token.text}`;
    default:
      return `'${token.text}'`;
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

function bytesToString(bytes: number[], ascii: boolean): string | undefined {
  if (ascii) {
    let out = "";
    for (let i = 0; i < bytes.length; i += 4096) {
      out += String.fromCharCode(...bytes.slice(i, i + 4096));
    }
    return out;
  }
  try {
    return utf8.decode(new Uint8Array(bytes));
  } catch {
    return undefined;
  }
}

class Parser {
  readonly #lex: Lexer;

  constructor(lex: Lexer) {
    this.#lex = lex;
  }

  /** Parses fields until `close` (or the end of input when `close` is null). */
  body(shape: Shape, close: string | null, open: Token | null, owner: string): Record<string, unknown> {
    const lex: Lexer = this.#lex;
    const out: Record<string, unknown> = {};
    const oneofs = new Map<string, string>();
    for (;;) {
      const token = lex.peek();
      if (token.kind === "ident") {
        this.#field(shape, out, oneofs);
        if (!lex.take(",")) lex.take(";");
        continue;
      }
      if (token.kind === "end") {
        if (close === null || open === null) return out;
        lex.fail(token, `missing '${close}' to close ${owner} opened at ${open.line}:${open.column}`);
      }
      if (token.kind === "symbol") {
        if (token.text === close) {
          lex.next();
          return out;
        }
        if (token.text === "[") lex.fail(token, "extensions are not supported");
        if (token.text === "}" || token.text === ">" || token.text === "]") {
          if (close === null || open === null) {
            lex.fail(token, `unexpected '${token.text}' outside of any message`);
          }
          lex.fail(
            token,
            `expected '${close}' to close ${owner} opened at ${open.line}:${open.column}, got '${token.text}'`,
          );
        }
      }
      lex.fail(token, `expected a field name, got ${describe(token)}`);
    }
  }

  #field(shape: Shape, out: Record<string, unknown>, oneofs: Map<string, string>): void {
    const lex: Lexer = this.#lex;
    const nameToken = lex.next();
    const name = nameToken.text;
    const info = shape.fields.get(name);
    if (!info) return lex.fail(nameToken, `unknown field '${name}' in ${shape.fullName}`);
    if (!info.repeated) {
      if (Object.hasOwn(out, name)) lex.fail(nameToken, `non-repeated field '${name}' is given twice`);
      if (info.oneof !== undefined) {
        const other = oneofs.get(info.oneof);
        if (other !== undefined) {
          lex.fail(nameToken, `field '${name}' and field '${other}' are both set in oneof '${info.oneof}'`);
        }
        oneofs.set(info.oneof, name);
      }
    }
    if (info.kind === "message") {
      lex.take(":");
      const token = lex.peek();
      if (token.kind === "symbol" && token.text === "[") {
        if (!info.repeated) lex.fail(token, `non-repeated field '${name}' cannot take a list`);
        lex.next();
        this.#list(info, token, () => this.#store(out, info, this.#messageValue(info)));
      } else {
        this.#store(out, info, this.#messageValue(info));
      }
      return;
    }
    const colon = lex.peek();
    if (colon.kind !== "symbol" || colon.text !== ":") {
      lex.fail(colon, `expected ':' after field '${name}', got ${describe(colon)}`);
    }
    lex.next();
    const token = lex.peek();
    if (token.kind === "symbol" && token.text === "[") {
      if (!info.repeated) lex.fail(token, `non-repeated field '${name}' cannot take a list`);
      lex.next();
      this.#list(info, token, () => this.#store(out, info, this.#scalar(info)));
    } else {
      this.#store(out, info, this.#scalar(info));
    }
  }

  /** Parses `item (, item)* ]` (the `[` already consumed), calling `item` for each element. */
  #list(info: FieldInfo, open: Token, item: () => void): void {
    const lex: Lexer = this.#lex;
    if (lex.take("]")) return;
    for (;;) {
      item();
      if (lex.take(",")) continue;
      if (lex.take("]")) return;
      const token = lex.peek();
      if (token.kind === "end") {
        lex.fail(
          token,
          `missing ']' to close the list of field '${info.name}' opened at ${open.line}:${open.column}`,
        );
      }
      lex.fail(token, `expected ',' or ']' in the list of field '${info.name}', got ${describe(token)}`);
    }
  }

  #store(out: Record<string, unknown>, info: FieldInfo, value: unknown): void {
    if (info.map) {
      const entry = value as { key: string; value: unknown };
      let map = out[info.name] as Record<string, unknown> | undefined;
      if (!map) setProp(out, info.name, map = {});
      setProp(map, entry.key, entry.value);
    } else if (info.repeated) {
      let list = out[info.name] as unknown[] | undefined;
      if (!list) setProp(out, info.name, list = []);
      list.push(value);
    } else {
      setProp(out, info.name, value);
    }
  }

  #messageValue(info: FieldInfo): unknown {
    const lex: Lexer = this.#lex;
    const open = lex.next();
    const close = open.kind !== "symbol" ? null : open.text === "{" ? "}" : open.text === "<" ? ">" : null;
    if (close === null) {
      return lex.fail(
        open,
        `expected '{' or '<' to start message field '${info.name}' (${info.type}), got ${describe(open)}`,
      );
    }
    const owner = `field '${info.name}'`;
    if (!info.map) return this.body(shapeOf(info.message as protobuf.Type), close, open, owner);
    const { key, value, entry: entryShape } = info.map;
    const entry = this.body(entryShape, close, open, owner);
    const k = Object.hasOwn(entry, "key") ? entry.key : defaultValue(key);
    const v = Object.hasOwn(entry, "value") ? entry.value : defaultValue(value);
    return { key: String(k), value: v };
  }

  #scalar(info: FieldInfo): unknown {
    if (info.kind === "enum") return this.#enum(info);
    const type = info.type;
    if (type === "string" || type === "bytes") return this.#string(info);
    if (type === "bool") return this.#bool(info);
    if (type === "float" || type === "double") return this.#float(info);
    if (isIntType(type)) return this.#integer(info, type);
    return this.#lex.fail(this.#lex.peek(), `field '${info.name}' has unsupported type '${type}'`);
  }

  /** Reads an optional `-` and the token after it; returns the sign, the token and how to show both. */
  #signed(): { negative: boolean; first: Token; token: Token; shown: string } {
    const lex: Lexer = this.#lex;
    const first = lex.next();
    if (first.kind !== "symbol" || first.text !== "-") {
      return { negative: false, first, token: first, shown: describe(first) };
    }
    const token = lex.next();
    const shown = token.kind === "int" || token.kind === "float" || token.kind === "ident"
      ? `'-${token.text}'`
      : `'-' followed by ${describe(token)}`;
    return { negative: true, first, token, shown };
  }

  #integer(info: FieldInfo, type: IntType): number | string {
    const lex: Lexer = this.#lex;
    const { negative, first, token, shown } = this.#signed();
    if (token.kind !== "int") {
      return lex.fail(first, `expected an integer for ${type} field '${info.name}', got ${shown}`);
    }
    const text = token.text;
    if (text.length < 10 && (text.length === 1 || text[0] !== "0")) {
      // Fast path: a short decimal is within every range but the sign of unsigned types.
      const small = Number(text);
      if (!negative) return small;
      if (!type.startsWith("u") && !type.startsWith("fixed")) return small === 0 ? 0 : -small;
    }
    const magnitude = parseBigInt(text);
    const value = negative ? -magnitude : magnitude;
    const [min, max] = INT_RANGES[type];
    const written = `${negative ? "-" : ""}${token.text}`;
    if (value < 0n && min === 0n) {
      lex.fail(first, `negative value ${written} for ${type} field '${info.name}'`);
    }
    if (value < min || value > max) {
      lex.fail(first, `integer ${written} is out of range for ${type} field '${info.name}'`);
    }
    return value >= -MAX_SAFE && value <= MAX_SAFE ? Number(value) : value.toString();
  }

  #float(info: FieldInfo): number {
    const { negative, first, token, shown } = this.#signed();
    let value: number | undefined;
    if (token.kind === "int") {
      value = Number(parseBigInt(token.text));
    } else if (token.kind === "float") {
      const text = token.text;
      value = Number(text.endsWith("f") || text.endsWith("F") ? text.slice(0, -1) : text);
    } else if (token.kind === "ident") {
      const lower = token.text.toLowerCase();
      if (lower === "inf" || lower === "infinity") value = Infinity;
      else if (lower === "nan") value = NaN;
    }
    if (value === undefined) {
      return this.#lex.fail(first, `expected a number for ${info.type} field '${info.name}', got ${shown}`);
    }
    return negative ? -value : value;
  }

  #bool(info: FieldInfo): boolean {
    const token = this.#lex.next();
    if (token.kind === "ident") {
      const t = token.text;
      if (t === "true" || t === "True" || t === "t") return true;
      if (t === "false" || t === "False" || t === "f") return false;
    } else if (token.kind === "int") {
      const value = parseBigInt(token.text);
      if (value === 0n || value === 1n) return value === 1n;
    }
    return this.#lex.fail(token, `expected a boolean for bool field '${info.name}', got ${describe(token)}`);
  }

  #string(info: FieldInfo): string | Uint8Array {
    const lex: Lexer = this.#lex;
    const first = lex.next();
    if (first.kind !== "string") {
      return lex.fail(
        first,
        `expected a string for ${info.type} field '${info.name}', got ${describe(first)}`,
      );
    }
    let bytes = first.bytes ?? [];
    let ascii = first.ascii;
    while (lex.peek().kind === "string") {
      const more = lex.next();
      bytes = bytes.concat(more.bytes ?? []);
      ascii &&= more.ascii;
    }
    if (info.type === "bytes") return new Uint8Array(bytes);
    const text = bytesToString(bytes, ascii);
    if (text === undefined) lex.fail(first, `invalid UTF-8 in string field '${info.name}'`);
    return text;
  }

  #enum(info: FieldInfo): string {
    const lex: Lexer = this.#lex;
    const enumType = info.enumType as protobuf.Enum;
    const peeked = lex.peek();
    if (peeked.kind === "ident") {
      lex.next();
      if (Object.hasOwn(enumType.values, peeked.text)) return peeked.text;
      return lex.fail(peeked, `unknown enum value '${peeked.text}' for field '${info.name}' (${info.type})`);
    }
    const { negative, first, token, shown } = this.#signed();
    if (token.kind !== "int") {
      return lex.fail(
        first,
        `expected an enum value name or number for field '${info.name}' (${info.type}), got ${shown}`,
      );
    }
    const magnitude = parseBigInt(token.text);
    const number = negative ? -magnitude : magnitude;
    const name = number >= -(2n ** 31n) && number < 2n ** 31n
      ? enumType.valuesById[Number(number)]
      : undefined;
    if (name === undefined) {
      return lex.fail(first, `unknown enum number ${number} for field '${info.name}' (${info.type})`);
    }
    return name;
  }
}

function parseBigInt(text: string): bigint {
  if (text.length > 1 && text[0] === "0" && text[1] !== "x" && text[1] !== "X") {
    return BigInt(`0o${text.slice(1)}`);
  }
  return BigInt(text);
}

function defaultValue(info: FieldInfo): unknown {
  if (info.kind === "message") return {};
  if (info.kind === "enum") {
    const enumType = info.enumType as protobuf.Enum;
    return enumType.valuesById[0] ?? Object.keys(enumType.values)[0] ?? 0;
  }
  switch (info.type) {
    case "string":
      return "";
    case "bytes":
      return new Uint8Array();
    case "bool":
      return false;
    default:
      return 0;
  }
}

/**
 * Parses protobuf text format (as in Triton's `config.pbtxt`) into a plain object for `type.fromObject`.
 * Fields keep their .proto names; 64-bit integers are numbers when safe, else decimal strings; enums are
 * value names; bytes are `Uint8Array`s; maps are plain objects. Nothing that the text does not set is filled.
 * @param text the text-format source
 * @param type the message type of the top level (from a root loaded with `keepCase: true`)
 * @param options the file name for error messages
 * @returns the parsed message as a plain object
 * @throws {TextFormatError} on any syntax or schema error, with its line and column
 * @example
 * ```ts
 * const config = parseTextFormat('name: "simple"\nmax_batch_size: 8', modelConfigType(), {
 *   filename: "config.pbtxt",
 * });
 * // { name: "simple", max_batch_size: 8 }
 * ```
 */
export function parseTextFormat(
  text: string,
  type: protobuf.Type,
  options: ParseTextFormatOptions = {},
): Record<string, unknown> {
  const lex = new Lexer(text, options.filename ?? "<input>");
  return new Parser(lex).body(shapeOf(type), null, null, trimDot(type.fullName));
}

// ---------------------------------------------------------------------------------------------------------
// Printer.

function octal(byte: number): string {
  return `\\${byte.toString(8).padStart(3, "0")}`;
}

function quoteBytes(bytes: Uint8Array): string {
  let out = '"';
  for (const b of bytes) {
    if (b === 34) out += '\\"';
    else if (b === 92) out += "\\\\";
    else if (b === 10) out += "\\n";
    else if (b === 13) out += "\\r";
    else if (b === 9) out += "\\t";
    else if (b >= 32 && b < 127) out += String.fromCharCode(b);
    else out += octal(b);
  }
  return `${out}"`;
}

function quoteString(text: string): string {
  let out = '"';
  for (let i = 0; i < text.length; i++) {
    const ch = text[i] ?? "";
    const c = text.charCodeAt(i);
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (c < 32 || c === 127) out += octal(c);
    else out += ch;
  }
  return `${out}"`;
}

function toBytes(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return value;
  if (Array.isArray(value)) return new Uint8Array(value as number[]);
  if (typeof value === "string") return Uint8Array.from(atob(value), (c) => c.charCodeAt(0));
  throw new Error(`Cannot format text: expected bytes, got ${typeof value}`);
}

function formatFloat(value: number): string {
  if (Number.isNaN(value)) return "nan";
  if (value === Infinity) return "inf";
  if (value === -Infinity) return "-inf";
  if (Object.is(value, -0)) return "-0";
  return String(value);
}

function formatScalar(info: FieldInfo, value: unknown): string {
  if (info.kind === "enum") {
    if (typeof value === "number") return (info.enumType as protobuf.Enum).valuesById[value] ?? String(value);
    return String(value);
  }
  switch (info.type) {
    case "string":
      return quoteString(String(value));
    case "bytes":
      return quoteBytes(toBytes(value));
    case "bool":
      return value ? "true" : "false";
    case "float":
    case "double":
      return formatFloat(Number(value));
    default:
      return String(value);
  }
}

function formatMapKey(info: FieldInfo, key: string): string {
  return info.type === "string" ? quoteString(key) : key;
}

function writeMessage(obj: Record<string, unknown>, shape: Shape, indent: string, out: string[]): void {
  for (const key of Object.keys(obj)) {
    if (!shape.fields.has(key) && !shape.oneofs.has(key)) {
      throw new Error(`Cannot format text: unknown field '${key}' in ${shape.fullName}`);
    }
  }
  for (const info of shape.fields.values()) {
    const value = obj[info.name];
    if (value === undefined || value === null) continue;
    if (info.map) {
      const { key, value: valueInfo } = info.map;
      for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
        out.push(`${indent}${info.name} {`, `${indent}  key: ${formatMapKey(key, k)}`);
        writeField(valueInfo, v, `${indent}  `, out);
        out.push(`${indent}}`);
      }
    } else if (info.repeated) {
      const list = value as unknown[];
      if (info.kind === "message") {
        for (const item of list) writeField(info, item, indent, out);
      } else if (list.length > 0) {
        out.push(`${indent}${info.name}: [${list.map((v) => formatScalar(info, v)).join(", ")}]`);
      }
    } else {
      writeField(info, value, indent, out);
    }
  }
}

function writeField(info: FieldInfo, value: unknown, indent: string, out: string[]): void {
  if (info.kind !== "message") {
    out.push(`${indent}${info.name}: ${formatScalar(info, value)}`);
    return;
  }
  const start = out.length;
  out.push(`${indent}${info.name} {`);
  writeMessage(value as Record<string, unknown>, shapeOf(info.message as protobuf.Type), `${indent}  `, out);
  if (out.length === start + 1) out[start] = `${indent}${info.name} {}`;
  else out.push(`${indent}}`);
}

/**
 * Writes a plain object (as returned by {@linkcode parseTextFormat} or `type.toObject`) as text format,
 * two-space indented, fields in declaration order.
 * @param obj the message as a plain object
 * @param type its message type
 * @returns the text, one field per line, ending with a newline unless empty
 * @example
 * ```ts
 * formatTextFormat({ name: "simple", max_batch_size: 8 }, modelConfigType());
 * // 'name: "simple"\nmax_batch_size: 8\n'
 * ```
 */
export function formatTextFormat(obj: Record<string, unknown>, type: protobuf.Type): string {
  const out: string[] = [];
  writeMessage(obj, shapeOf(type), "", out);
  return out.length === 0 ? "" : `${out.join("\n")}\n`;
}
