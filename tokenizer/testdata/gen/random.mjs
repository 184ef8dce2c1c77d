// Random test strings shared by the generators: a small deterministic PRNG
// and strings of atoms drawn from each generator's stress alphabet, so the
// random cases are stable from run to run.

// rng is mulberry32 seeded with seed: numbers in [0, 1).
export function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// randomCases returns n cases named random_I, each 1 to maxAtoms atoms.
export function randomCases(n, seed, atoms, maxAtoms) {
  const r = rng(seed);
  const out = [];
  for (let i = 0; i < n; i++) {
    const len = 1 + Math.floor(r() * maxAtoms);
    let s = "";
    for (let j = 0; j < len; j++) s += atoms[Math.floor(r() * atoms.length)];
    out.push({ name: `random_${i}`, text: s });
  }
  return out;
}
