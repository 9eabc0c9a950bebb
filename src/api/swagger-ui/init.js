// The document is found beside this page, relative to this script, so the page works under
// --rootpath. A file, not an inline script: the default Content-Security-Policy allows no
// inline scripts.
window.ui = SwaggerUIBundle({
  url: new URL("../swagger.json", document.currentScript.src).href,
  dom_id: "#swagger-ui",
});
