/** A request's body may be up to 32 MB, as the API takes; base64 makes a file a third larger. */
export const MOST_REQUEST_BYTES = 32 * 1024 * 1024;

/** The most file bytes one request can carry, base64 and the rest of the request beside it. */
export const MOST_REQUEST_FILE_BYTES = Math.floor(((MOST_REQUEST_BYTES - 64 * 1024) * 3) / 4);
