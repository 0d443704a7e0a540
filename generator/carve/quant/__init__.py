"""int8 post-training quantization (``--precision int8``): docs/quantization.md.

``arith`` is the integer arithmetic every int8 kernel implements, written once in numpy: the generator's
simulator and the tests of the C kernels (portable and xnnpack) compare against it.
"""
