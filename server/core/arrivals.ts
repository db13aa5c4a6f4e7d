/**
 * How busy the frontends are, as the dynamic batcher needs to know it.
 * @module
 */

import { setImmediate } from "node:timers";

/** The weight of the latest turn in the average of arrivals per turn (see ArrivalCounter.alone). */
const ALONE_WEIGHT = 0.125;
/** The average of arrivals per turn under which requests count as arriving alone. */
const ALONE_MAX = 1.05;

/**
 * Counts the inference requests that arrive in each event-loop turn. The inference pipeline counts every
 * arrival; the dynamic batcher asks whether requests are arriving together: a request that arrives alone
 * should run at once, one of several arriving together should wait one turn to be batched with them. The
 * Python backend asks whether they have been arriving one at a time lately (`alone()`): only then does a stub
 * spin for its next call.
 *
 * Turns are only told apart once someone has asked (the first `together()`, which a dynamic batcher without a
 * queue delay makes when it is created, or `alone()`, at a Python model's first call): a server without either
 * pays no end-of-turn callback per request.
 */
export class ArrivalCounter {
  #thisTurn = 0;
  #lastTurn = 0;
  /** The arrivals per turn (of those that had any), averaged with ALONE_WEIGHT on the latest. */
  #perTurn = 1;
  #scheduled = false;
  #total = 0;
  /** Whether `together()` or `alone()` has been asked: only then are arrivals counted per turn. */
  #asked = false;
  readonly #turnEnded = () => {
    this.#perTurn += (this.#thisTurn - this.#perTurn) * ALONE_WEIGHT;
    this.#lastTurn = this.#thisTurn;
    this.#thisTurn = 0;
    this.#scheduled = false;
  };

  /** Counts an arriving inference request. */
  arrived(): void {
    this.#total++;
    if (!this.#asked) return;
    this.#thisTurn++;
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(this.#turnEnded);
  }

  /** How many inference requests have arrived since the counter was made (it only grows). */
  get total(): number {
    let n = this.#total;
    for (const source of this.#sources) n += source();
    return n;
  }

  /** Requests counted elsewhere (other threads), which `total` adds. */
  #sources: (() => number)[] = [];

  /**
   * Adds requests counted elsewhere to `total` (not to `together`, which is about this thread's turns).
   * @param source the count so far (it only grows)
   */
  addSource(source: () => number): void {
    this.#sources.push(source);
  }

  /**
   * Whether requests have been arriving one at a time lately: none other in this turn, and the recent turns
   * that had arrivals averaged under ALONE_MAX each (a turn with two lifts the average above it for the next
   * seven or so turns of one).
   */
  alone(): boolean {
    this.#asked = true;
    return this.#thisTurn <= 1 && this.#perTurn < ALONE_MAX;
  }

  /** Whether requests are arriving together: more than one in this turn or in the last turn that had arrivals. */
  together(): boolean {
    this.#asked = true;
    return this.#thisTurn > 1 || this.#lastTurn > 1;
  }
}
