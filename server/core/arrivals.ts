/**
 * How busy the frontends are, as the dynamic batcher needs to know it.
 * @module
 */

import { setImmediate } from "node:timers";

/**
 * Counts the inference requests that arrive in each event-loop turn. The inference pipeline counts every
 * arrival; the dynamic batcher asks whether requests are arriving together: a request that arrives alone
 * should run at once, one of several arriving together should wait one turn to be batched with them.
 */
export class ArrivalCounter {
  #thisTurn = 0;
  #lastTurn = 0;
  #scheduled = false;
  #total = 0;
  readonly #turnEnded = () => {
    this.#lastTurn = this.#thisTurn;
    this.#thisTurn = 0;
    this.#scheduled = false;
  };

  /** Counts an arriving inference request. */
  arrived(): void {
    this.#total++;
    this.#thisTurn++;
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(this.#turnEnded);
  }

  /** How many inference requests have arrived since the counter was made (it only grows). */
  get total(): number {
    return this.#total;
  }

  /** Whether requests are arriving together: more than one in this turn or in the last turn that had arrivals. */
  together(): boolean {
    return this.#thisTurn > 1 || this.#lastTurn > 1;
  }
}
