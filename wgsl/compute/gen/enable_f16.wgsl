// ENABLE of a program holding an operand in half precision (shader-f16): the directive that opens its source.
enable f16;
