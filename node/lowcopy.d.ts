// Types of the package entry point (lowcopy.js): the native API of index.d.ts.
export * from './index'
