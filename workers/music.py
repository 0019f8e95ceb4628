"""Example activities for the module example of seed 003: a Producer, a Composer and a Sound-Designer.

The Producer is an agent job (`workers/jobs/producer.json`); the Composer and the Sound-Designer are saved
modules (`workers/modules/composer.json`, `workers/modules/sound_designer.json`), each run in its own clean
room. The Producer calls `composeSong` (module `composer`, which in turn calls `designSound`) and `designSound`
(module `sound_designer`) directly, in parallel, then `masterRecord`::

    Producer ──composeSong──► Composer ──designSound──► Sound-Designer
        └────────────designSound──────────────────────► Sound-Designer

The activities below are the inline tools those agents run: `writeMelody` and `arrangeSong` (Composer),
`programSynth` (Sound-Designer), `masterRecord` (Producer). Importing this module registers them on the default
`Activity` registry; `register_activities(registry)` registers them on another one. Their tool schemas, and the
two module tools, are the JSON files in `TOOLS_DIR` (`workers/music_tools/`), which `agentq worker -m
workers.music` loads.

Everything is deterministic, offline and fast: melodies come from a hash of their parameters and a little music
theory, patches from keyword tables. `AGENTQ_DEMO_DELAY_MS` (default 0) adds a small delay to every activity.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentq.errors import NonRetryableError
from agentq.protocol.activities import Activity

__all__ = [
    "ACTIVITIES",
    "FORMS",
    "MODES",
    "MODULES_DIR",
    "MODULE_TOOL_NAMES",
    "ROLES",
    "TOOLS_DIR",
    "TOOL_NAMES",
    "arrange_song",
    "master_record",
    "parse_key",
    "program_synth",
    "register_activities",
    "write_melody",
]

TOOLS_DIR = Path(__file__).resolve().parent / "music_tools"  # shipped inside the package (package data)
MODULES_DIR = Path(__file__).resolve().parent / "modules"  # the saved modules (searched after AGENTQ_MODULE_DIRS)
TOOL_NAMES = ("writeMelody", "arrangeSong", "programSynth", "masterRecord")  # tools with an activity here
MODULE_TOOL_NAMES = ("composeSong", "designSound")  # tools delegated to a module

NOTES = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")
FLAT_NOTES = ("C", "Db", "D", "Eb", "E", "F", "Gb", "G", "Ab", "A", "Bb", "B")
_PITCH_CLASS = {name: i for i, name in enumerate(NOTES)} | {name: i for i, name in enumerate(FLAT_NOTES)}
MODES: dict[str, tuple[int, ...]] = {
    "major": (0, 2, 4, 5, 7, 9, 11),
    "minor": (0, 2, 3, 5, 7, 8, 10),
    "harmonic minor": (0, 2, 3, 5, 7, 8, 11),
    "dorian": (0, 2, 3, 5, 7, 9, 10),
    "phrygian": (0, 1, 3, 5, 7, 8, 10),
    "lydian": (0, 2, 4, 6, 7, 9, 11),
    "mixolydian": (0, 2, 4, 5, 7, 9, 10),
}
_MODE_ALIASES = {"ionian": "major", "maj": "major", "aeolian": "minor", "min": "minor", "m": "minor"}
_METERS = {"4/4": 4.0, "3/4": 3.0, "6/8": 3.0, "2/4": 2.0}  # beats (quarter notes) per bar

# mood -> contour, scale steps to choose from, note lengths (beats), default tempo, octave, progression (degrees)
_MOODS: dict[str, dict[str, Any]] = {
    "sad": {"contour": "descending", "steps": (-1, -1, 1, -2, 0, -1, 2), "lengths": (2.0, 1.0, 1.5, 0.5, 1.0),
            "tempo": 68, "octave": 4, "progression": (0, 5, 2, 6)},
    "happy": {"contour": "ascending", "steps": (1, 2, 1, -1, 3, 1, -2), "lengths": (1.0, 0.5, 0.5, 1.0, 2.0),
              "tempo": 120, "octave": 5, "progression": (0, 4, 5, 3)},
    "mysterious": {"contour": "static", "steps": (1, -1, 0, 2, -2, 1, -1), "lengths": (1.5, 0.5, 1.0, 2.0),
                   "tempo": 84, "octave": 4, "progression": (0, 1, 0, 6)},
    "energetic": {"contour": "arch", "steps": (2, 1, -1, 3, -2, 1, -3), "lengths": (0.5, 0.5, 1.0, 0.5),
                  "tempo": 140, "octave": 5, "progression": (0, 6, 5, 4)},
    "calm": {"contour": "arch", "steps": (1, -1, 2, -2, 1, 0), "lengths": (2.0, 1.0, 1.0, 3.0),
             "tempo": 76, "octave": 4, "progression": (0, 3, 0, 4)},
}
_MOOD_WORDS = {
    "sad": ("sad", "melanchol", "ballad", "longing", "grief", "lonely", "blue", "somber", "sombre", "wistful"),
    "happy": ("happy", "joy", "uplift", "bright", "cheer", "sunny", "hopeful", "triumph"),
    "mysterious": ("myster", "dark", "tense", "eerie", "haunt", "ominous", "suspense"),
    "energetic": ("energ", "driving", "fast", "aggressive", "dance", "upbeat", "power"),
    "calm": ("calm", "ambient", "peace", "gentle", "serene", "soft", "dream", "float"),
}

#: form -> sections (name, bars) and the instruments it is written for
FORMS: dict[str, dict[str, Any]] = {
    "ballad": {"sections": (("intro", 4), ("verse", 8), ("verse", 8), ("chorus", 8), ("verse", 8), ("chorus", 8),
                            ("bridge", 4), ("chorus", 8), ("outro", 4)),
               "instruments": ("piano", "strings", "bass", "pad")},
    "pop": {"sections": (("intro", 4), ("verse", 8), ("pre-chorus", 4), ("chorus", 8), ("verse", 8),
                         ("pre-chorus", 4), ("chorus", 8), ("bridge", 8), ("chorus", 8), ("outro", 4)),
            "instruments": ("keys", "lead", "bass", "drums", "pad")},
    "rock": {"sections": (("intro", 4), ("verse", 8), ("chorus", 8), ("verse", 8), ("chorus", 8), ("solo", 8),
                          ("chorus", 8), ("outro", 4)),
             "instruments": ("guitar", "lead", "bass", "drums")},
    "ambient": {"sections": (("fade-in", 8), ("drift", 16), ("swell", 8), ("drift", 16), ("fade-out", 8)),
                "instruments": ("pad", "texture", "bass")},
    "interlude": {"sections": (("intro", 2), ("theme", 8), ("outro", 2)),
                  "instruments": ("pad", "keys")},
}
_DYNAMICS = {"intro": "p", "verse": "mp", "pre-chorus": "mf", "chorus": "f", "bridge": "mp", "solo": "f",
             "outro": "p", "fade-in": "pp", "drift": "p", "swell": "mf", "fade-out": "pp", "theme": "mp"}
_SPARSE = {"intro", "outro", "fade-in", "fade-out"}  # sections played by the first two instruments only

ROLES = ("pad", "lead", "bass", "keys", "strings", "percussion", "ambience", "foley", "fx")
# role -> oscillators (waveform, octave, detune cents, level), filter (type, cutoff, resonance), ADSR, effects
_PATCHES: dict[str, dict[str, Any]] = {
    "pad": {"osc": (("saw", 0, 12, 0.5), ("saw", 0, -12, 0.5)), "filter": ("lowpass", 2200.0, 0.2),
            "env": (800, 1200, 0.8, 2500), "fx": (("chorus", 0.3), ("reverb", 0.45))},
    "lead": {"osc": (("square", 0, 0, 0.8), ("saw", 0, 7, 0.3)), "filter": ("lowpass", 4500.0, 0.35),
             "env": (5, 200, 0.7, 300), "fx": (("delay", 0.25),)},
    "bass": {"osc": (("saw", 0, 0, 0.7), ("sine", -1, 0, 0.6)), "filter": ("lowpass", 700.0, 0.3),
             "env": (5, 250, 0.8, 150), "fx": ()},
    "keys": {"osc": (("triangle", 0, 0, 0.7), ("sine", 1, 0, 0.3)), "filter": ("lowpass", 3500.0, 0.1),
             "env": (5, 600, 0.4, 500), "fx": (("tremolo", 0.2), ("reverb", 0.2))},
    "strings": {"osc": (("saw", 0, 8, 0.4), ("saw", 0, -8, 0.4), ("saw", -1, 0, 0.3)),
                "filter": ("lowpass", 3000.0, 0.15), "env": (350, 500, 0.9, 1200), "fx": (("reverb", 0.35),)},
    "percussion": {"osc": (("noise_white", 0, 0, 0.6), ("sine", 0, 0, 0.8)), "filter": ("bandpass", 1800.0, 0.4),
                   "env": (1, 120, 0.0, 80), "fx": (("saturation", 0.15),)},
    "ambience": {"osc": (("noise_pink", 0, 0, 0.8),), "filter": ("bandpass", 1200.0, 0.2),
                 "env": (3000, 0, 1.0, 4000), "fx": (("reverb", 0.6),)},
    "foley": {"osc": (("noise_white", 0, 0, 0.8),), "filter": ("bandpass", 3000.0, 0.3),
              "env": (2, 80, 0.3, 200), "fx": (("reverb", 0.15),)},
    "fx": {"osc": (("saw", 0, 0, 0.5), ("noise_white", 0, 0, 0.4)), "filter": ("lowpass", 1500.0, 0.6),
           "env": (50, 400, 0.5, 900), "fx": (("delay", 0.3), ("reverb", 0.4))},
}
_DEFAULT_NOTES = {"bass": "A1", "pad": "A3", "lead": "A4", "keys": "A3", "strings": "A3", "percussion": "A2",
                  "fx": "A2"}
_KIND_GAIN_DB = {"song": 0.0, "interlude": -3.0, "intro": -4.0, "outro": -4.0, "ambience": -6.0}


def _demo_delay() -> None:
    try:
        delay_ms = float(os.environ.get("AGENTQ_DEMO_DELAY_MS", "0") or 0)
    except ValueError:
        delay_ms = 0.0
    if delay_ms > 0:
        time.sleep(delay_ms / 1000.0)


def _digest(*parts: Any, length: int = 12) -> str:
    raw = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(raw.encode()).hexdigest()[:length]


def _stream(*parts: Any) -> Iterator[int]:
    """An endless, deterministic stream of bytes derived from `parts` (the melody's dice)."""
    seed = json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()
    counter = 0
    while True:
        yield from hashlib.sha256(seed + counter.to_bytes(4, "big")).digest()
        counter += 1


def _invalid(message: str, type_: str = "InvalidMusicRequestError") -> NonRetryableError:
    return NonRetryableError(message, type=type_)


def _number(call: dict, name: str, default: float, low: float, high: float) -> float:
    value = call.get(name, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise _invalid(f"{name} must be a number from {low:g} to {high:g}, got {value!r}")
    return float(value)


def _mmss(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60}:{whole % 60:02d}"


# --- music theory -------------------------------------------------------------------------------------------


def parse_key(text: Any) -> tuple[int, str, bool]:
    """(tonic pitch class, mode, spelled with flats) of a key such as "A minor", "Eb major", "D dorian", "F#m"."""
    if not isinstance(text, str) or not text.strip():
        raise _invalid(f"key must be a string such as 'A minor', got {text!r}", "InvalidKeyError")
    match = re.fullmatch(r"\s*([A-Ga-g])([#b♯♭]?)\s*(.*?)\s*", text)
    if not match:
        raise _invalid(f"cannot read key {text!r}; write it like 'A minor' or 'Eb major'", "InvalidKeyError")
    letter, accidental, mode = match.group(1).upper(), match.group(2), match.group(3).lower()
    accidental = {"♯": "#", "♭": "b"}.get(accidental, accidental)
    mode = _MODE_ALIASES.get(mode, mode) or "major"
    if mode not in MODES:
        raise _invalid(f"unknown mode {match.group(3)!r} in key {text!r}; modes: {', '.join(MODES)}",
                       "InvalidKeyError")
    name = letter + accidental
    if name not in _PITCH_CLASS:  # e.g. "E#", "Cb"
        raise _invalid(f"unknown note {name!r} in key {text!r}", "InvalidKeyError")
    return _PITCH_CLASS[name], mode, accidental == "b" or (accidental == "" and letter == "F")


def _note_name(midi: int, flats: bool) -> str:
    return (FLAT_NOTES if flats else NOTES)[midi % 12] + str(midi // 12 - 1)


def _midi(note: str) -> int:
    match = re.fullmatch(r"([A-Ga-g])([#b]?)(-?\d)", note.strip())
    if not match or (match.group(1).upper() + match.group(2)) not in _PITCH_CLASS:
        raise _invalid(f"note must look like 'A2' or 'C#4', got {note!r}", "InvalidNoteError")
    return _PITCH_CLASS[match.group(1).upper() + match.group(2)] + 12 * (int(match.group(3)) + 1)


def _chord(tonic: int, steps: tuple[int, ...], degree: int, flats: bool) -> str:
    """The triad on a scale degree, named (Am, F, Bdim, C+)."""
    root, third, fifth = (steps[(degree + k) % 7] + 12 * ((degree + k) // 7) for k in (0, 2, 4))
    quality = {(4, 7): "", (3, 7): "m", (3, 6): "dim", (4, 8): "+"}.get((third - root, fifth - root), "")
    return (FLAT_NOTES if flats else NOTES)[(tonic + root) % 12] + quality


def _mood(text: str) -> str:
    lowered = text.lower()
    for mood, words in _MOOD_WORDS.items():
        if any(word in lowered for word in words):
            return mood
    return "calm"


# --- activities ---------------------------------------------------------------------------------------------


def write_melody(call: dict) -> dict:
    """`writeMelody`: a melody (the song's hook) in a key, for a mood: notes, range and chord progression."""
    _demo_delay()
    key_text = call.get("key") or "C major"
    tonic, mode, flats = parse_key(key_text)
    mood_text = str(call.get("mood") or "calm")
    mood = _mood(mood_text)
    profile = _MOODS[mood]
    tempo = round(_number(call, "tempo_bpm", profile["tempo"], 30, 240))
    bars = int(_number(call, "bars", 8, 1, 32))
    meter = call.get("time_signature") or "4/4"
    if meter not in _METERS:
        raise _invalid(f"time_signature must be one of {', '.join(_METERS)}, got {meter!r}")
    steps = MODES[mode]
    dice = _stream(key_text, mood, tempo, bars, meter)

    base = 12 * (profile["octave"] + 1) + tonic  # the tonic in the mood's octave
    degree = {"descending": 7, "ascending": 0, "static": 2, "arch": 0}[profile["contour"]]
    notes = []
    for bar in range(1, bars + 1):
        beat = 0.0
        while beat < _METERS[meter]:
            length = min(profile["lengths"][next(dice) % len(profile["lengths"])], _METERS[meter] - beat)
            final = bar == bars and beat + length >= _METERS[meter]
            if final:
                degree = 0 if profile["contour"] != "ascending" else 7  # resolve to the tonic
            midi = base + steps[degree % 7] + 12 * (degree // 7)
            notes.append({"bar": bar, "beat": beat + 1, "pitch": _note_name(midi, flats), "midi": midi,
                          "beats": length})
            degree = max(-3, min(10, degree + profile["steps"][next(dice) % len(profile["steps"])]))
            beat += length
    chords_per_bar = 1 if bars <= 4 else 2
    progression = [_chord(tonic, steps, profile["progression"][(i // chords_per_bar) % 4], flats)
                   for i in range(bars)]
    low, high = min(n["midi"] for n in notes), max(n["midi"] for n in notes)
    return {
        "key": f"{(FLAT_NOTES if flats else NOTES)[tonic]} {mode}",
        "scale": [(FLAT_NOTES if flats else NOTES)[(tonic + s) % 12] for s in steps],
        "mood": mood,
        "contour": profile["contour"],
        "tempo_bpm": tempo,
        "time_signature": meter,
        "bars": bars,
        "notes": notes,
        "chords": progression,
        "range": {"low": _note_name(low, flats), "high": _note_name(high, flats), "semitones": high - low},
        "duration_s": round(bars * _METERS[meter] * 60 / tempo, 2),
    }


def arrange_song(call: dict) -> dict:
    """`arrangeSong`: the song's structure: sections with bars, start times, dynamics and instrumentation."""
    _demo_delay()
    form = call.get("form") or "pop"
    if form not in FORMS:
        raise _invalid(f"form must be one of {', '.join(FORMS)}, got {form!r}")
    tempo = _number(call, "tempo_bpm", 100, 30, 240)
    meter = call.get("time_signature") or "4/4"
    if meter not in _METERS:
        raise _invalid(f"time_signature must be one of {', '.join(_METERS)}, got {meter!r}")
    instruments = call.get("instruments") or list(FORMS[form]["instruments"])
    if not isinstance(instruments, list) or not all(isinstance(i, str) and i.strip() for i in instruments):
        raise _invalid("instruments must be a list of part names")
    bar_s = _METERS[meter] * 60 / tempo
    plan = list(FORMS[form]["sections"])
    natural = sum(bars for _, bars in plan) * bar_s
    target = call.get("target_length_s")
    if target is not None:
        factor = _number(call, "target_length_s", natural, 10, 3600) / natural
        plan = [(name, max(2, round(bars * factor / 2) * 2)) for name, bars in plan]

    sections, start, counts = [], 0.0, dict.fromkeys((name for name, _ in plan), 0)
    for name, bars in plan:
        counts[name] += 1
        total = sum(1 for n, _ in plan if n == name)
        duration = bars * bar_s
        sections.append({
            "name": name,
            "label": f"{name} {counts[name]}" if total > 1 else name,
            "bars": bars,
            "start_s": round(start, 2),
            "duration_s": round(duration, 2),
            "dynamics": _DYNAMICS.get(name, "mf"),
            "instruments": instruments[:2] if name in _SPARSE else list(instruments),
        })
        start += duration
    return {
        "form": form,
        "tempo_bpm": round(tempo),
        "time_signature": meter,
        "sections": sections,
        "total_bars": sum(s["bars"] for s in sections),
        "duration_s": round(start, 2),
        "duration": _mmss(start),
        "instruments": list(instruments),
    }


def _apply_character(patch: dict, words: str) -> list[str]:
    """Timbre words and sound sources of a description change the base patch; returns the words used."""
    matched = []

    def has(*needles: str) -> bool:
        found = [n for n in needles if re.search(rf"\b{n}(?:s|es|y|ly)?\b", words)]
        matched.extend(found[:1])
        return bool(found)

    filt, env = patch["filter"], patch["amp_envelope"]
    if has("warm", "mellow"):
        filt["cutoff_hz"] *= 0.7
        patch["effects"].append({"type": "saturation", "mix": 0.2})
    if has("bright", "crisp", "shimmer"):
        filt["cutoff_hz"] *= 1.6
    if has("dark", "muffled", "distant"):
        filt["cutoff_hz"] *= 0.5
    if has("soft", "gentle", "tender"):
        env["attack_ms"] = env["attack_ms"] * 2 + 10
        for osc in patch["oscillators"]:
            osc["level"] = round(osc["level"] * 0.7, 3)
    if has("aggressive", "gritty", "harsh"):
        filt["resonance"] = min(0.95, filt["resonance"] + 0.25)
        patch["effects"].append({"type": "distortion", "mix": 0.35})
    if has("airy", "breathy"):
        patch["oscillators"].append({"waveform": "noise_pink", "octave": 0, "detune_cents": 0, "level": 0.15})
    if has("wide", "lush"):
        patch["effects"].append({"type": "chorus", "mix": 0.4})
        for osc in patch["oscillators"]:
            osc["detune_cents"] = round(osc["detune_cents"] * 1.5)
    if has("pluck", "staccato", "short"):
        env.update(decay_ms=300, sustain=0.0, release_ms=min(env["release_ms"], 200))
    if has("long", "slow", "evolving", "swell"):
        env["attack_ms"] *= 3
        env["release_ms"] *= 2
        patch["lfo"] = {"target": "filter.cutoff_hz", "rate_hz": 0.1, "depth": 0.3}
    if has("bell", "metallic", "glass"):
        patch["oscillators"].append({"waveform": "fm", "octave": 1, "detune_cents": 0, "level": 0.4, "ratio": 3.5})
    # sound sources (foley and ambiences)
    if has("rain", "drizzle"):
        patch["oscillators"] = [{"waveform": "noise_pink", "octave": 0, "detune_cents": 0, "level": 0.8}]
        filt.update(type="bandpass", cutoff_hz=4000.0)
        patch["effects"].append({"type": "granular", "mix": 0.5, "density_per_s": 180})
    if has("wind", "breeze"):
        patch["oscillators"] = [{"waveform": "noise_brown", "octave": 0, "detune_cents": 0, "level": 0.8}]
        filt.update(type="bandpass", cutoff_hz=600.0)
        patch["lfo"] = {"target": "filter.cutoff_hz", "rate_hz": 0.08, "depth": 0.6}
    if has("foghorn"):
        patch["oscillators"] = [{"waveform": "saw", "octave": 0, "detune_cents": 0, "level": 0.8},
                                {"waveform": "square", "octave": -1, "detune_cents": 5, "level": 0.4}]
        filt.update(type="lowpass", cutoff_hz=400.0)
        env.update(attack_ms=400, decay_ms=0, sustain=1.0, release_ms=1500)
        patch["note"] = patch["note"] or "E2"
    if has("thunder", "rumble"):
        patch["oscillators"] = [{"waveform": "noise_brown", "octave": 0, "detune_cents": 0, "level": 0.9}]
        filt.update(type="lowpass", cutoff_hz=180.0)
    if has("wave", "ocean", "surf"):
        patch["oscillators"] = [{"waveform": "noise_pink", "octave": 0, "detune_cents": 0, "level": 0.8}]
        filt.update(type="lowpass", cutoff_hz=1500.0)
        patch["lfo"] = {"target": "amp", "rate_hz": 0.08, "depth": 0.7}
    if has("crackle", "vinyl", "fire"):
        patch["oscillators"].append({"waveform": "impulses", "octave": 0, "detune_cents": 0, "level": 0.3,
                                     "rate_per_s": 12})
    filt["cutoff_hz"] = round(min(max(filt["cutoff_hz"], 40.0), 18000.0), 1)
    return matched


def program_synth(call: dict) -> dict:
    """`programSynth`: a synthesizer patch for one sound: oscillators, filter, envelope, LFO and effects."""
    _demo_delay()
    name = str(call.get("name") or "").strip()
    if not name:
        raise _invalid("a sound needs a name")
    role = call.get("role") or "pad"
    if role not in ROLES:
        raise _invalid(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    description = str(call.get("description") or "")
    base = _PATCHES[role]
    note = call.get("note") or _DEFAULT_NOTES.get(role)
    if note is not None and not isinstance(note, str):
        raise _invalid(f"note must be a string such as 'A2', got {note!r}", "InvalidNoteError")
    patch: dict[str, Any] = {
        "oscillators": [{"waveform": w, "octave": o, "detune_cents": d, "level": lv} for w, o, d, lv in base["osc"]],
        "filter": {"type": base["filter"][0], "cutoff_hz": base["filter"][1], "resonance": base["filter"][2]},
        "amp_envelope": dict(zip(("attack_ms", "decay_ms", "sustain", "release_ms"), base["env"], strict=True)),
        "lfo": None,
        "effects": [{"type": t, "mix": m} for t, m in base["fx"]],
        "note": note,
    }
    character = _apply_character(patch, f"{name} {description}".lower())
    pitched = any(not o["waveform"].startswith(("noise", "impulses")) for o in patch["oscillators"])
    note = patch["note"] if pitched else None
    fundamental = round(440.0 * 2 ** ((_midi(note) - 69) / 12), 2) if note else None
    cutoff = patch["filter"]["cutoff_hz"]
    low = round(fundamental * 2 ** min(o["octave"] for o in patch["oscillators"]), 1) if fundamental else 20.0
    high = cutoff if patch["filter"]["type"] != "highpass" else 18000.0
    tempo = call.get("tempo_bpm")
    if patch["lfo"] is not None and isinstance(tempo, (int, float)) and not isinstance(tempo, bool) and tempo > 0:
        patch["lfo"]["rate_hz"] = round(tempo / 60 / 16, 4)  # one cycle every four bars of 4/4
    return {
        "name": name,
        "role": role,
        "description": description,
        **{k: patch[k] for k in ("oscillators", "filter", "amp_envelope", "lfo", "effects")},
        "note": note,
        "fundamental_hz": fundamental,
        "frequency_range_hz": [low, max(high, low)],
        "character": character,
        "patch_id": "patch_" + _digest(name, role, description, note, tempo),
    }


def _brief(context: Any) -> dict:
    """The `brief` view when the call was given that scope, else {}."""
    try:
        view = context["brief"] if context is not None else {}
    except (KeyError, TypeError, IndexError):
        return {}
    return view if isinstance(view, dict) else {}


def master_record(call: dict, tool: dict, context: Any) -> dict:
    """`masterRecord`: sequence the tracks into a record (start times, fades, gain staging) and master it."""
    _demo_delay()
    brief = _brief(context)
    title = str(call.get("title") or brief.get("title") or "Untitled").strip()
    artist = str(call.get("artist") or brief.get("artist") or "Unknown artist").strip()
    tracks = call.get("tracks")
    if not isinstance(tracks, list) or not tracks:
        raise _invalid("tracks must be a non-empty list of {title, duration_s, kind}")
    gap = _number(call, "gap_s", 2.0, 0, 10)
    lufs = _number(call, "target_lufs", -14.0, -23, -6)
    kinds = list(_KIND_GAIN_DB)
    sequenced, start = [], 0.0
    for i, track in enumerate(tracks):
        if not isinstance(track, dict) or not str(track.get("title") or "").strip():
            raise _invalid(f"tracks[{i}] must be an object with a title")
        duration = track.get("duration_s")
        if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not 0 < duration <= 3600:
            raise _invalid(f"tracks[{i}].duration_s must be a number of seconds from 0 to 3600, got {duration!r}")
        kind = track.get("kind") or "song"
        if kind not in _KIND_GAIN_DB:
            raise _invalid(f"tracks[{i}].kind must be one of {', '.join(kinds)}, got {kind!r}")
        last = i == len(tracks) - 1
        sequenced.append({
            "number": i + 1,
            "title": str(track["title"]).strip(),
            "kind": kind,
            "start_s": round(start, 2),
            "end_s": round(start + duration, 2),
            "duration_s": round(float(duration), 2),
            "duration": _mmss(duration),
            "fade_in_s": 3.0 if kind in ("ambience", "intro") else 0.5,
            "fade_out_s": 4.0 if last else 0.5 if kind == "song" else 1.5,
            "gain_db": _KIND_GAIN_DB[kind],
        })
        start += duration + (0.0 if last else gap)
    return {
        "catalog_id": "REC-" + _digest(title, artist, [(t["title"], t["duration_s"]) for t in sequenced],
                                       length=8).upper(),
        "title": title,
        "artist": artist,
        "tracks": sequenced,
        "total_duration_s": round(start, 2),
        "total_duration": _mmss(start),
        "master": {"target_lufs": lufs, "true_peak_dbtp": -1.0, "sample_rate_hz": 48000, "bit_depth": 24,
                   "format": "WAV"},
    }


# --- registration -------------------------------------------------------------------------------------------

#: activity name -> (handler, options for `ActivityRegistry.register`)
ACTIVITIES: dict[str, tuple[Any, dict[str, Any]]] = {
    "writeMelody": (write_melody, {"timeout": 10}),
    "arrangeSong": (arrange_song, {"timeout": 10}),
    "programSynth": (program_synth, {"retries": 1, "retry_backoff": 0.05, "timeout": 10}),
    "masterRecord": (master_record, {"timeout": 30}),
}


def register_activities(registry: Any) -> None:
    """Register this module's activities on `registry` (an `ActivityRegistry`)."""
    for name, (handler, options) in ACTIVITIES.items():
        registry.register(name, handler, **options)


register_activities(Activity)
