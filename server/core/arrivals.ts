/**
 * How busy the frontends are, as the dynamic batcher needs to know it.
 * @module
 */

import { setImmediate } from "node:timers";

/**
 * Counts the inference requests that arrive in each event-loop turn. The inference pipeline counts every
 * arrival; the dynamic batcher asks whether requests are arriving together: a request that arrives alone
 * should run at once, one of several arriving together should wait one turn to be batched with them.
 *
 * Turns are only told apart once someone has asked (the first `together()`, which a dynamic batcher without a
 * queue delay makes when it is created): a server without one pays no end-of-turn callback per request.
 */
export class ArrivalCounter {
  #thisTurn = 0;
  #lastTurn = 0;
  #scheduled = false;
  #total = 0;
  /** Whether `together()` has been asked: only then are arrivals counted per turn. */
  #asked = false;
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

  /** Whether requests are arriving together: more than one in this turn or in the last turn that had arrivals. */
  together(): boolean {
    this.#asked = true;
    return this.#thisTurn > 1 || this.#lastTurn > 1;
  }
}
