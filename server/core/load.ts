/**
 * How busy the frontends are, as the dynamic batcher needs to know it: how many inference requests are between
 * their arrival at a frontend and their answer. A request that is alone should run at once; one of several in
 * flight should wait one event-loop turn to be batched with the others.
 * @module
 */

let inFlight = 0;

/** Counts an arriving inference request (the frontends call it first thing, and `requestAnswered` once after). */
export function requestArrived(): void {
  inFlight++;
}

/** Ends the count of a request `requestArrived` counted, once it is answered or has failed. */
export function requestAnswered(): void {
  if (inFlight > 0) inFlight--;
}

/** Whether requests are arriving together: more than one inference request is in flight at the frontends. */
export function arrivingTogether(): boolean {
  return inFlight > 1;
}
