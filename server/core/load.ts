/**
 * How busy the frontends are, as the dynamic batcher needs to know it: how many inference requests arrived in
 * the current event-loop turn and in the last turn that had arrivals. A request that arrives alone should run at once; one of
 * several arriving together should wait one turn to be batched with them.
 * @module
 */

import { setImmediate } from "node:timers";

let thisTurn = 0;
let lastTurn = 0;
let scheduled = false;
let arrived = 0;

/** Counts an arriving inference request (the frontends call it first thing). */
export function requestArrived(): void {
  arrived++;
  thisTurn++;
  if (scheduled) return;
  scheduled = true;
  setImmediate(() => {
    lastTurn = thisTurn;
    thisTurn = 0;
    scheduled = false;
  });
}

/** Whether requests are arriving together: more than one in this turn or in the last turn that had arrivals. */
export function arrivingTogether(): boolean {
  return thisTurn > 1 || lastTurn > 1;
}

/** How many inference requests have arrived since the process started (it only grows). */
export function arrivalCount(): number {
  return arrived;
}
