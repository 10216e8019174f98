#!/usr/bin/env python3
"""Writes the Keras model files of examples/keras/ (docs/MODELS.md, "Keras models to start from").

No Keras here: each model is written as Keras 3's model.to_json() writes it, by the same writers
as the tests' fixtures (tests/fixtures/keras/make_fixtures.py), from Keras's own definitions:

  mobilenet_v2.json        keras.applications.MobileNetV2(weights=None, input_shape=(224, 224, 3),
                           classes=5): alpha 1.0, 2,264,389 parameters, Keras's layer names
  mobilenet_v2_0.35.json   the same with alpha=0.35
  small_cnn.json           Keras's "Simple MNIST convnet" example (28x28x1, 10 classes)
  small_resnet.json        a ResNet-style net for 28x28x1 inputs: a stem, two residual stages
                           (identity and 1x1-projection shortcuts, batch norm), global pooling

Run it from the repository root (python3 examples/keras/make_examples.py); the outputs are committed.
"""
import importlib.util
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "make_fixtures", os.path.join(HERE, "..", "..", "tests", "fixtures", "keras", "make_fixtures.py"))
fx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fx)


def relu(m, name, x):
    return m.add("ReLU", name, {"max_value": None, "negative_slope": 0.0, "threshold": 0.0}, [x], m.shapes[x])


def dense(m, name, x, units, activation):
    return m.add("Dense", name, {
        "units": units, "activation": activation, "use_bias": True,
        "kernel_initializer": fx.init3("GlorotUniform", {"seed": None}), "bias_initializer": fx.init3("Zeros"),
        "kernel_regularizer": None, "bias_regularizer": None, "kernel_constraint": None, "bias_constraint": None},
        [x], [units])


def small_cnn(size=28, channels=1, classes=10):
    """keras.io's "Simple MNIST convnet": conv 32 - pool - conv 64 - pool - flatten - dropout 0.5 - dense."""
    m = fx.K3("small_cnn")
    x = m.input("input_layer", [size, size, channels])
    for i, filters in enumerate((32, 64)):
        x = m.conv("conv2d_%d" % i, x, filters, 3, padding="valid", use_bias=True)
        x = relu(m, "relu_%d" % i, x)
        h, w, c = m.shapes[x]
        x = m.add("MaxPooling2D", "max_pooling2d_%d" % i, {"pool_size": [2, 2], "padding": "valid",
                                                           "strides": [2, 2], "data_format": "channels_last"},
                  [x], [h // 2, w // 2, c])
    h, w, c = m.shapes[x]
    x = m.add("Flatten", "flatten", {"data_format": "channels_last"}, [x], [h * w * c])
    x = m.add("Dropout", "dropout", {"rate": 0.5, "seed": None, "noise_shape": None}, [x], m.shapes[x])
    return m.model(dense(m, "dense", x, classes, "softmax"))


def small_resnet(size=28, channels=1, classes=10):
    """conv 16 - bn - relu; stage 1: 2 blocks of 16 (identity shortcuts); stage 2: a block of 32 at
    stride 2 (1x1 projection shortcut with batch norm) and one of 32; global average pool; dense."""
    m = fx.K3("small_resnet")
    x = m.input("input_layer", [size, size, channels])
    x = relu(m, "stem_relu", m.bn("stem_bn", m.conv("stem_conv", x, 16, 3)))

    def block(x, filters, stride, name):
        shortcut = x
        y = relu(m, name + "_1_relu", m.bn(name + "_1_bn", m.conv(name + "_1_conv", x, filters, 3, stride=stride)))
        y = m.bn(name + "_2_bn", m.conv(name + "_2_conv", y, filters, 3))
        if stride != 1 or m.shapes[x][2] != filters:
            shortcut = m.bn(name + "_0_bn", m.conv(name + "_0_conv", x, filters, 1, stride=stride))
        return relu(m, name + "_out", m.add("Add", name + "_add", {}, [shortcut, y], m.shapes[y]))

    x = block(x, 16, 1, "conv2_block1")
    x = block(x, 16, 1, "conv2_block2")
    x = block(x, 32, 2, "conv3_block1")
    x = block(x, 32, 1, "conv3_block2")
    x = m.add("GlobalAveragePooling2D", "avg_pool", {"data_format": "channels_last", "keepdims": False}, [x],
              [m.shapes[x][2]])
    return m.model(dense(m, "predictions", x, classes, "softmax"))


def write(name, obj):
    with open(os.path.join(HERE, name), "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    write("mobilenet_v2.json", fx.mobilenet_v2(size=224, classes=5, alpha=1.0))
    write("mobilenet_v2_0.35.json", fx.mobilenet_v2(size=224, classes=5, alpha=0.35))
    write("small_cnn.json", small_cnn())
    write("small_resnet.json", small_resnet())
