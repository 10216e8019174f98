#!/usr/bin/python3
"""scripts/make_flowers.py — an offline stand-in for tf_flowers (seed 004's workload).

Writes DIR/<class>/<class>_NNNNN.jpg in the layout Keras's
image_dataset_from_directory reads (and dtrain's --problem=image_folder):
five classes named as tf_flowers names them (daisy, dandelion, roses,
sunflowers, tulips), 3,670 images in all by default (tf_flowers' size),
224x224 RGB JPEGs (quality 90).

Each image is drawn from its own generator, seeded by (--seed, class,
index), so the same seed gives the same pixels whatever --count or the
order of generation; the JPEG bytes are the same too for the same Pillow
and libjpeg (the digest printed at the end lets two runs be compared).

The classes differ as a CNN can see (shape, colour and texture), while
position, scale, rotation, petal count, background and noise vary per
image, so a model has to learn them rather than one pixel:
  daisy       many thin white petals round a small yellow disc
  dandelion   a dense yellow puff of short spiky rays, no disc
  roses       red or pink nested rings (a spiral of petals)
  sunflowers  few broad yellow petals round a large brown seeded disc
  tulips      a cup (ellipse and three pointed petals) on a green stem

Needs Debian's python3-pil and python3-numpy. Run with /usr/bin/python3
(the image's default python3 is a pyenv build that cannot see them).

  scripts/make_flowers.py OUT_DIR [--count 3670] [--size 224] [--seed 4]
"""
import argparse
import hashlib
import math
import os
import sys

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

CLASSES = ("daisy", "dandelion", "roses", "sunflowers", "tulips")


def background(rng, size):
    """A vertical two-colour gradient (foliage, sky or soil) with blotches."""
    top = rng.integers(20, 140, 3)
    bottom = rng.integers(20, 140, 3)
    top[1] = max(top[1], rng.integers(60, 160))  # mostly greenish, as flower photos are
    t = np.linspace(0.0, 1.0, size)[:, None, None]
    img = (top[None, None, :] * (1 - t) + bottom[None, None, :] * t) * np.ones((1, size, 1))
    im = Image.fromarray(img.astype(np.uint8), "RGB")
    d = ImageDraw.Draw(im)
    for _ in range(int(rng.integers(3, 9))):
        cx, cy, r = rng.integers(0, size, 2).tolist() + [int(rng.integers(size // 16, size // 5))]
        col = tuple(int(v) for v in np.clip(top + rng.integers(-40, 40, 3), 0, 255))
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=col)
    return im.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(2.0, 6.0))))


def jitter(rng, rgb, amount=25):
    return tuple(int(v) for v in np.clip(np.array(rgb) + rng.integers(-amount, amount + 1, 3), 0, 255))


def petal(d, cx, cy, angle, r0, r1, width, fill):
    """A pointed petal from radius r0 to r1 along angle, width at its middle."""
    ca, sa = math.cos(angle), math.sin(angle)
    mid = (r0 + r1) / 2
    pts = [(cx + r0 * ca, cy + r0 * sa), (cx + mid * ca - width * sa, cy + mid * sa + width * ca),
           (cx + r1 * ca, cy + r1 * sa), (cx + mid * ca + width * sa, cy + mid * sa - width * ca)]
    d.polygon(pts, fill=fill)


def draw_daisy(d, rng, cx, cy, r):
    n = int(rng.integers(18, 30))
    rot = rng.uniform(0, 2 * math.pi)
    for i in range(n):
        petal(d, cx, cy, rot + 2 * math.pi * i / n, r * 0.15, r, r * rng.uniform(0.06, 0.09),
              jitter(rng, (245, 245, 240), 10))
    c = r * rng.uniform(0.18, 0.24)
    d.ellipse([cx - c, cy - c, cx + c, cy + c], fill=jitter(rng, (235, 190, 30), 15))


def draw_dandelion(d, rng, cx, cy, r):
    for _ in range(int(rng.integers(160, 260))):
        a = rng.uniform(0, 2 * math.pi)
        rr = r * math.sqrt(rng.uniform(0.05, 1.0))
        w = max(1, int(r * 0.04))
        d.line([(cx, cy), (cx + rr * math.cos(a), cy + rr * math.sin(a))], fill=jitter(rng, (250, 210, 20), 20),
               width=w)


def draw_roses(d, rng, cx, cy, r):
    base = (200, 20, 40) if rng.uniform() < 0.6 else (235, 110, 150)
    k = int(rng.integers(5, 9))
    for i in range(k):
        rr = r * (1 - i / k)
        off = rng.uniform(-0.08, 0.08, 2) * r
        shade = 1.0 - 0.5 * (i % 2)
        col = jitter(rng, tuple(int(v * shade) for v in base), 15)
        d.ellipse([cx + off[0] - rr, cy + off[1] - rr * 0.9, cx + off[0] + rr, cy + off[1] + rr * 0.9], fill=col)


def draw_sunflower(d, rng, cx, cy, r):
    n = int(rng.integers(11, 17))
    rot = rng.uniform(0, 2 * math.pi)
    for i in range(n):
        petal(d, cx, cy, rot + 2 * math.pi * i / n, r * 0.35, r, r * rng.uniform(0.16, 0.22),
              jitter(rng, (250, 190, 10), 15))
    c = r * rng.uniform(0.42, 0.5)
    d.ellipse([cx - c, cy - c, cx + c, cy + c], fill=jitter(rng, (90, 50, 15), 15))
    for _ in range(int(rng.integers(40, 80))):  # seeds: the disc's texture
        a, rr = rng.uniform(0, 2 * math.pi), c * math.sqrt(rng.uniform(0, 0.9))
        x, y, s = cx + rr * math.cos(a), cy + rr * math.sin(a), max(1.0, c * 0.05)
        d.ellipse([x - s, y - s, x + s, y + s], fill=jitter(rng, (50, 30, 10), 10))


def draw_tulip(d, rng, cx, cy, r):
    base = [(220, 30, 30), (150, 40, 170), (250, 140, 20), (240, 90, 160)][int(rng.integers(0, 4))]
    col = jitter(rng, base, 20)
    d.line([(cx, cy), (cx + rng.uniform(-0.2, 0.2) * r, cy + 1.6 * r)], fill=jitter(rng, (40, 130, 40), 15),
           width=max(2, int(r * 0.12)))
    d.ellipse([cx - 0.55 * r, cy - 0.4 * r, cx + 0.55 * r, cy + 0.6 * r], fill=col)
    for dx in (-0.4, 0.0, 0.4):  # three pointed petal tips above the cup
        d.polygon([(cx + (dx - 0.25) * r, cy), (cx + dx * r, cy - 0.9 * r), (cx + (dx + 0.25) * r, cy)],
                  fill=jitter(rng, col, 12))


DRAW = (draw_daisy, draw_dandelion, draw_roses, draw_sunflower, draw_tulip)


def make_image(seed, label, index, size):
    rng = np.random.default_rng([seed, label, index])
    im = background(rng, size)
    d = ImageDraw.Draw(im)
    for _ in range(int(rng.integers(1, 4))):  # one to three flowers of the class
        r = size * rng.uniform(0.15, 0.38)
        cx, cy = rng.uniform(r * 0.6, size - r * 0.6, 2)
        DRAW[label](d, rng, cx, cy, r)
    im = im.rotate(float(rng.uniform(-30, 30)), resample=Image.BILINEAR, fillcolor=tuple(rng.integers(0, 120, 3)))
    a = np.asarray(im, dtype=np.float32)
    a = a * rng.uniform(0.7, 1.2) + rng.normal(0.0, rng.uniform(2.0, 12.0), a.shape)  # exposure and sensor noise
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--count", type=int, default=3670, help="images in all, split evenly over the 5 classes")
    ap.add_argument("--size", type=int, default=224, help="width and height in pixels")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--quality", type=int, default=90, help="JPEG quality")
    a = ap.parse_args(argv)
    if a.count < len(CLASSES) or a.size < 16 or a.size > 4096 or a.seed < 0:
        ap.error("need --count >= 5, --size 16 to 4096 and --seed >= 0")
    digest = hashlib.sha256()
    for label, name in enumerate(CLASSES):
        cdir = os.path.join(a.out_dir, name)
        os.makedirs(cdir, exist_ok=True)
        n = a.count // len(CLASSES) + (1 if label < a.count % len(CLASSES) else 0)
        for i in range(n):
            path = os.path.join(cdir, "%s_%05d.jpg" % (name, i))
            make_image(a.seed, label, i, a.size).save(path, "JPEG", quality=a.quality)
            with open(path, "rb") as f:
                digest.update(f.read())
    print("%d images of %dx%d in %s, seed %d, sha256 %s" % (a.count, a.size, a.size, a.out_dir, a.seed,
                                                            digest.hexdigest()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
