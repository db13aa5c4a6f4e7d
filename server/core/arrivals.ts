/**
 * How busy the frontends are, as the dynamic batcher needs to know it.
 * @module
 */

import { setImmediate } from "node:timers";

/** The weight of the latest request in the average of requests inside the models (see ArrivalCounter.alone). */
const ALONE_WEIGHT = 0.125;
/** The average of requests inside the models (at each start) under which requests count as arriving alone. */
const ALONE_MAX = 1.05;

/**
 * Counts the inference requests that arrive, those inside the models, and those that arrive in each event-loop
 * turn. The inference pipeline counts every arrival, and every request from the moment it goes to its model
 * until the model answers (`started`, `finished`). The dynamic batcher asks whether requests are arriving
 * together: a request that arrives alone should run at once, one of several arriving together should wait one
 * turn to be batched with them. The Python backend asks whether they have been arriving one at a time lately
 * (`alone()`): only then does a stub spin for its next call.
 *
 * Turns are only told apart once the dynamic batcher has asked (the first `together()`, which a dynamic batcher
 * without a queue delay makes when it is created): a server without one pays no end-of-turn callback per
 * request. `alone()` needs none: it reads the requests inside the models.
 */
export class ArrivalCounter {
  #thisTurn = 0;
  #lastTurn = 0;
  #scheduled = false;
  #total = 0;
  /** Whether `together()` has been asked: only then are arrivals counted per turn. */
  #asked = false;
  /** Requests inside the models now (started, not finished). */
  #inside = 0;
  /** The requests inside the models as each started (itself included), averaged with ALONE_WEIGHT on the latest. */
  #perStart = 1;
  readonly #turnEnded = () => {
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

  /** Counts a request going to its model; `finished` must follow once the model has answered or failed. */
  started(): void {
    this.#inside++;
    this.#perStart += (this.#inside - this.#perStart) * ALONE_WEIGHT;
  }

  /** Counts a request whose model has answered or failed. */
  finished(): void {
    this.#inside--;
  }

  /** The requests inside the models now. */
  get inside(): number {
    return this.#inside;
  }

  /**
   * Whether requests have been arriving one at a time lately: no other request is inside the models, and the
   * recent requests found, as they started, none other inside on average (under ALONE_MAX with themselves: one
   * that found another lifts the average above it for the next seven or so).
   */
  alone(): boolean {
    return this.#inside <= 1 && this.#perStart < ALONE_MAX;
  }

  /** Whether requests are arriving together: more than one in this turn or in the last turn that had arrivals. */
  together(): boolean {
    this.#asked = true;
    return this.#thisTurn > 1 || this.#lastTurn > 1;
  }
}
