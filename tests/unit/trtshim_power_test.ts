/**
 * The power reading of the FFI layer (ffi/trtshim.ts, trtshim_device_power) against the MOCK libtrtshim,
 * whose devices get it from TRTSHIM_MOCK_POWER_MW, TRTSHIM_MOCK_POWER_LIMIT_MW and TRTSHIM_MOCK_ENERGY_MJ.
 * @module
 */

import assert from "node:assert/strict";
import { openTrtShim, Status, SYMBOLS, TrtShim, TrtShimError } from "../../ffi/trtshim.ts";
import { mockShim } from "../_trtshim.ts";

const path = await mockShim();
const ignore = path === undefined;

const VARS = ["TRTSHIM_MOCK_POWER_MW", "TRTSHIM_MOCK_POWER_LIMIT_MW", "TRTSHIM_MOCK_ENERGY_MJ"];

/** Runs `fn` with the mock's power variables set as given (unset otherwise), then unsets them. */
function withPower(env: Record<string, string>, fn: () => void): void {
  for (const name of VARS) Deno.env.delete(name);
  for (const [k, v] of Object.entries(env)) Deno.env.set(k, v);
  try {
    fn();
  } finally {
    for (const name of [...VARS, ...Object.keys(env)]) Deno.env.delete(name);
  }
}

Deno.test(
  { name: "power() converts the mock's milliwatts and millijoules to watts and joules", ignore },
  () => {
    const s = openTrtShim(path!);
    withPower({
      TRTSHIM_MOCK_POWER_MW: "123456",
      TRTSHIM_MOCK_POWER_LIMIT_MW: "300000",
      TRTSHIM_MOCK_ENERGY_MJ: "9007199254740",
    }, () => {
      assert.deepEqual(s.power(0), { usageW: 123.456, limitW: 300, energyJ: 9007199254.74 });
    });
  },
);

Deno.test(
  { name: "power() is undefined for a device without the reading, one variable missing", ignore },
  () => {
    const s = openTrtShim(path!);
    withPower({}, () => assert.equal(s.power(0), undefined));
    withPower({ TRTSHIM_MOCK_POWER_MW: "1", TRTSHIM_MOCK_POWER_LIMIT_MW: "2" }, () => {
      assert.equal(s.power(0), undefined);
    });
    withPower({
      TRTSHIM_MOCK_DEVICE_COUNT: "2",
      TRTSHIM_MOCK_POWER_MW: "1000,",
      TRTSHIM_MOCK_POWER_LIMIT_MW: "2000",
      TRTSHIM_MOCK_ENERGY_MJ: "3000",
    }, () => {
      assert.deepEqual(s.power(0), { usageW: 1, limitW: 2, energyJ: 3 });
      assert.equal(s.power(1), undefined);
    });
  },
);

Deno.test({ name: "power() throws for an unknown device and a malformed mock value", ignore }, () => {
  const s = openTrtShim(path!);
  assert.throws(() => s.power(5), (err: unknown) => {
    assert.ok(err instanceof TrtShimError);
    assert.equal(err.status, Status.NOT_FOUND);
    assert.equal(err.message, "Device 5 does not exist (1 devices)");
    return true;
  });
  withPower(
    { TRTSHIM_MOCK_POWER_MW: "1W", TRTSHIM_MOCK_POWER_LIMIT_MW: "2", TRTSHIM_MOCK_ENERGY_MJ: "3" },
    () => {
      assert.throws(() => s.power(0), (err: unknown) => {
        assert.ok(err instanceof TrtShimError);
        assert.equal(err.status, Status.INVALID_ARGUMENT);
        assert.equal(
          err.message,
          "Cannot read TRTSHIM_MOCK_POWER_MW='1W': '1W' is not a non-negative integer",
        );
        return true;
      });
    },
  );
});

Deno.test(
  { name: "a library without trtshim_device_power opens and reports no power reading", ignore },
  () => {
    assert.equal(SYMBOLS.trtshim_device_power.optional, true);
    const lib = Deno.dlopen(path!, SYMBOLS);
    try {
      // What Deno binds for a library built before the function was added: null.
      const s = new TrtShim({ ...lib.symbols, trtshim_device_power: null }, path!);
      withPower(
        { TRTSHIM_MOCK_POWER_MW: "1", TRTSHIM_MOCK_POWER_LIMIT_MW: "2", TRTSHIM_MOCK_ENERGY_MJ: "3" },
        () => {
          assert.equal(s.power(0), undefined);
          assert.deepEqual(new TrtShim(lib.symbols, path!).power(0), {
            usageW: 0.001,
            limitW: 0.002,
            energyJ: 0.003,
          });
        },
      );
    } finally {
      lib.close();
    }
  },
);
