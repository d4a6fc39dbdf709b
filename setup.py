from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("shoal.records._scan", ["src/shoal/records/_scan.c"], extra_compile_args=["-O2"]),
        Extension("shoal.records._columns", ["src/shoal/records/_columns.c"], extra_compile_args=["-O2"]),
        Extension("shoal.objects._durable", ["src/shoal/objects/_durable.c"], extra_compile_args=["-O2"]),
    ]
)
