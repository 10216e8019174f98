#!/usr/bin/python3
"""Writes image folders for dtrain's image_folder tests with PIL (python3-pil),
an encoder independent of the decoders under test.

  make_images.py fixture DIR   edge cases + DIR/expected.txt
  make_images.py train DIR N   N learnable images per class (3 classes)

expected.txt: one line per image the reader must accept,
  <path relative to DIR> <class index> <r> <g> <b> <grey>
the colour every pixel decodes to (JPEG within a few levels), where
<grey> is the ITU-R 601 luma dtrain gives for one channel.
"""
import os
import random
import sys

from PIL import Image


def luma(r, g, b):
    return (77 * r + 150 * g + 29 * b + 128) >> 8


def fixture(root):
    # bytewise order: "C_birds" < "a_cats" < "b_dogs" (Keras sorts the same way)
    classes = ["C_birds", "a_cats", "b_dogs"]
    colours = [(20, 40, 220), (230, 60, 30), (40, 200, 70)]
    lines = []
    for ci, (cls, (r, g, b)) in enumerate(zip(classes, colours)):
        d = os.path.join(root, cls)
        os.makedirs(os.path.join(d, "nested"), exist_ok=True)

        def keep(name, rgb, grey=None):
            rr, gg, bb = rgb
            lines.append("%s/%s %d %d %d %d %d" % (cls, name, ci, rr, gg, bb,
                                                    luma(rr, gg, bb) if grey is None else grey))

        Image.new("RGB", (24, 16), (r, g, b)).save(os.path.join(d, "rgb.jpg"), quality=95)
        keep("rgb.jpg", (r, g, b))
        Image.new("RGB", (17, 29), (r, g, b)).save(os.path.join(d, "rgb.PNG"))
        keep("rgb.PNG", (r, g, b))
        v = luma(r, g, b)
        Image.new("L", (20, 20), v).save(os.path.join(d, "grey.png"))
        keep("grey.png", (v, v, v), v)
        Image.new("L", (16, 16), v).save(os.path.join(d, "grey.jpeg"), quality=95)
        keep("grey.jpeg", (v, v, v), v)
        # RGBA with alpha 0 on the left half: TensorFlow drops alpha, so the
        # colour must come through unchanged (no compositing onto black)
        im = Image.new("RGBA", (10, 12), (r, g, b, 255))
        for y in range(12):
            for x in range(5):
                im.putpixel((x, y), (r, g, b, 0))
        im.save(os.path.join(d, "rgba.png"))
        keep("rgba.png", (r, g, b))
        Image.new("RGB", (13, 11), (r, g, b)).save(os.path.join(d, "nested", "bmp24.bmp"))
        keep("nested/bmp24.bmp", (r, g, b))
        Image.new("RGB", (9, 7), (r, g, b)).convert("P", palette=Image.ADAPTIVE).save(os.path.join(d, "palette.gif"))
        keep("palette.gif", (r, g, b))
        with open(os.path.join(d, "readme.txt"), "w") as f:  # not an image name: ignored
            f.write("not an image\n")
    os.makedirs(os.path.join(root, ".hidden_class"), exist_ok=True)
    Image.new("RGB", (8, 8)).save(os.path.join(root, ".hidden_class", "x.png"))
    with open(os.path.join(root, "expected.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def bad(root):
    """Two bad files in class a_cats: text named .jpg and a JPEG cut in half."""
    d = os.path.join(root, "a_cats")
    with open(os.path.join(d, "notes.jpg"), "w") as f:
        f.write("hello, I am text\n")
    noise = Image.effect_noise((64, 64), 60).convert("RGB")
    path = os.path.join(d, "cut.jpg")
    noise.save(path, quality=90)
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])


def train(root, n):
    rnd = random.Random(7)
    colours = [(200, 40, 40), (40, 200, 40), (40, 40, 200)]
    for ci, base in enumerate(colours):
        d = os.path.join(root, "class_%d" % ci)
        os.makedirs(d, exist_ok=True)
        for i in range(n):
            w, h = rnd.randint(24, 48), rnd.randint(24, 48)
            im = Image.new("RGB", (w, h), tuple(min(255, max(0, c + rnd.randint(-50, 50))) for c in base))
            noise = Image.effect_noise((w, h), 30).convert("RGB")
            im = Image.blend(im, noise, 0.3)
            ext = ["jpg", "png"][i % 2]
            im.save(os.path.join(d, "%03d.%s" % (i, ext)))


if __name__ == "__main__":
    mode, root = sys.argv[1], sys.argv[2]
    os.makedirs(root, exist_ok=True)
    if mode == "fixture":
        fixture(root)
    elif mode == "fixture_bad":
        fixture(root)
        bad(root)
    elif mode == "train":
        train(root, int(sys.argv[3]))
    else:
        sys.exit("unknown mode " + mode)
